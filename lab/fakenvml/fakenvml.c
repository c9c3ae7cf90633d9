/*
 * fakenvml.c -- a fake libnvidia-ml.so.1 that answers from a scenario file.
 *
 * Compiled against the real nvml.h (PyPI wheel nvidia-nvml-dev), so the
 * compiler checks every signature and struct we implement, and with
 * -Werror=missing-prototypes so that every exported function is one that
 * nvml.h declares.  See lab/scenarios/README.md for the scenario format.
 *
 *   FAKENVML_SCENARIO  scenario file read at init (default /etc/fakenvml/scenario),
 *                      and again by a running process whenever it or a file it
 *                      includes changes (see maybe_reload: checked at most every 50 ms)
 *   FAKENVML_TRACE     if set, one line per NVML call is appended to this file:
 *                      "<function>" or "<function> gpu=<index>"
 *   FAKENVML_UNDER_LOAD  set and non-empty in the calling process (read at every
 *                      call): the GPUs answer their gpu.N.under_load.* values
 *                      (the fake CuPy sets it once a GEMM has run)
 *
 * Rules kept on purpose: every index is bounds-checked, every string copy is
 * bounded and terminated, handles are pointers into g_gpus (validated on every
 * call, never derived from a caller's index pointer), and the only global
 * state is the loaded scenario, the init reference count and the versions of
 * the scenario files loaded.
 */
#define _GNU_SOURCE
#include <nvml.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAKE_MAX_GPUS 64
#define FAKE_VAL_LEN 256
#define FAKE_LINE_LEN 1024
#define FAKE_MAX_RULES 64
#define FAKE_MAX_INCLUDE_DEPTH 8
#define FAKE_MAX_FILES 32 /* files one scenario reads (itself and its includes), each followed by maybe_reload */
#define FAKE_MAX_LIST 64
#define FAKE_MAGIC 0x464b4e56u /* "FKNV" */
#define FAKE_DEFAULT_SCENARIO "/etc/fakenvml/scenario"
#define FAKE_RELOAD_NS 50000000LL /* at most one stat of the scenario's files per 50 ms */

/* ------------------------------------------------------------------------ */
/* Scenario model                                                            */
/* ------------------------------------------------------------------------ */

enum val_state { VAL_UNSET = 0, VAL_UNSUPPORTED = 1, VAL_SET = 2 };

typedef struct {
    int state;
    char s[FAKE_VAL_LEN];
} fake_val;

enum ftype {
    T_STR, T_U32, T_U64, T_INT, T_BOOL, T_CC, T_REASONS, T_PAGES, T_LINKS,
    T_BUSID, T_HEX128, T_FABSTATE, T_RETCODE, T_PROCS
};

enum field {
    F_NAME, F_UUID, F_SERIAL, F_VBIOS, F_BOARD_PART, F_INFOROM, F_MINOR, F_PCI_BUS_ID, F_PCI_DEVICE_ID, F_PCI_SUBSYS_ID,
    F_MEM_TOTAL, F_MEM_RESERVED, F_MEM_USED, F_CC, F_PERSIST, F_MIG, F_MIG_PENDING,
    F_ECC, F_ECC_PENDING, F_ECC_CV, F_ECC_CA, F_ECC_UV, F_ECC_UA,
    F_RP_SBE, F_RP_DBE, F_RP_PENDING, F_RR_CORR, F_RR_UNC, F_RR_PENDING, F_RR_FAIL,
    F_CLOCKS, F_SM_CLOCK, F_TEMP, F_TEMP_SHUTDOWN, F_TEMP_SLOWDOWN, F_TEMP_GPU_MAX, F_TEMP_MEM_MAX,
    F_POWER, F_POWER_LIMIT, F_PCIE_GEN_CUR, F_PCIE_GEN_MAX, F_PCIE_W_CUR, F_PCIE_W_MAX,
    F_NVLINK_COUNT, F_NVLINK_DOWN, F_NUMA, F_FAB_STATE, F_FAB_STATUS, F_FAB_CLIQUE,
    F_FAB_UUID, F_FAB_HEALTH, F_PROCS_COMPUTE, F_PROCS_GRAPHICS, F_SURVIVES_RESET,
    F_LOAD_CLOCKS, F_LOAD_SM_CLOCK, F_LOAD_TEMP, F_LOAD_POWER,
    F_COUNT
};

static const struct { const char *name; enum ftype type; } k_fields[F_COUNT] = {
    [F_NAME] = {"name", T_STR},
    [F_UUID] = {"uuid", T_STR},
    [F_SERIAL] = {"serial", T_STR},
    [F_VBIOS] = {"vbios_version", T_STR},
    [F_BOARD_PART] = {"board_part_number", T_STR},
    [F_INFOROM] = {"inforom_image_version", T_STR},
    [F_MINOR] = {"minor_number", T_U32},
    [F_PCI_BUS_ID] = {"pci_bus_id", T_BUSID},
    [F_PCI_DEVICE_ID] = {"pci_device_id", T_U32},
    [F_PCI_SUBSYS_ID] = {"pci_subsystem_id", T_U32},
    [F_MEM_TOTAL] = {"memory_total_bytes", T_U64},
    [F_MEM_RESERVED] = {"memory_reserved_bytes", T_U64},
    [F_MEM_USED] = {"memory_used_bytes", T_U64},
    [F_CC] = {"compute_capability", T_CC},
    [F_PERSIST] = {"persistence_mode", T_BOOL},
    [F_MIG] = {"mig_mode", T_BOOL},
    [F_MIG_PENDING] = {"mig_mode_pending", T_BOOL},
    [F_ECC] = {"ecc_mode", T_BOOL},
    [F_ECC_PENDING] = {"ecc_mode_pending", T_BOOL},
    [F_ECC_CV] = {"ecc_corrected_volatile", T_U64},
    [F_ECC_CA] = {"ecc_corrected_aggregate", T_U64},
    [F_ECC_UV] = {"ecc_uncorrected_volatile", T_U64},
    [F_ECC_UA] = {"ecc_uncorrected_aggregate", T_U64},
    [F_RP_SBE] = {"retired_pages_sbe", T_PAGES},
    [F_RP_DBE] = {"retired_pages_dbe", T_PAGES},
    [F_RP_PENDING] = {"retired_pages_pending", T_BOOL},
    [F_RR_CORR] = {"row_remap_correctable", T_U32},
    [F_RR_UNC] = {"row_remap_uncorrectable", T_U32},
    [F_RR_PENDING] = {"row_remap_pending", T_BOOL},
    [F_RR_FAIL] = {"row_remap_failure", T_BOOL},
    [F_CLOCKS] = {"clocks_event_reasons", T_REASONS},
    [F_SM_CLOCK] = {"sm_clock_MHz", T_U32},
    [F_TEMP] = {"temperature_C", T_U32},
    [F_TEMP_SHUTDOWN] = {"temperature_shutdown_C", T_U32},
    [F_TEMP_SLOWDOWN] = {"temperature_slowdown_C", T_U32},
    [F_TEMP_GPU_MAX] = {"temperature_gpu_max_C", T_U32},
    [F_TEMP_MEM_MAX] = {"temperature_mem_max_C", T_U32},
    [F_POWER] = {"power_usage_mW", T_U32},
    [F_POWER_LIMIT] = {"enforced_power_limit_mW", T_U32},
    [F_PCIE_GEN_CUR] = {"pcie_gen_current", T_U32},
    [F_PCIE_GEN_MAX] = {"pcie_gen_max", T_U32},
    [F_PCIE_W_CUR] = {"pcie_width_current", T_U32},
    [F_PCIE_W_MAX] = {"pcie_width_max", T_U32},
    [F_NVLINK_COUNT] = {"nvlink_count", T_U32},
    [F_NVLINK_DOWN] = {"nvlink_down", T_LINKS},
    [F_NUMA] = {"numa_node", T_U32},
    [F_FAB_STATE] = {"fabric_state", T_FABSTATE},
    [F_FAB_STATUS] = {"fabric_status", T_RETCODE},
    [F_FAB_CLIQUE] = {"fabric_clique_id", T_U32},
    [F_FAB_UUID] = {"fabric_cluster_uuid", T_HEX128},
    [F_FAB_HEALTH] = {"fabric_health_mask", T_U32},
    [F_PROCS_COMPUTE] = {"compute_processes", T_PROCS},
    [F_PROCS_GRAPHICS] = {"graphics_processes", T_PROCS},
    /* Not an NVML answer: the lab's stand-in `nvidia-smi -r` leaves this GPU's fault in place (hardware). */
    [F_SURVIVES_RESET] = {"survives_reset", T_BOOL},
    /* What the same calls answer while the caller is under load (FAKENVML_UNDER_LOAD): see load_field(). */
    [F_LOAD_CLOCKS] = {"under_load.clocks_event_reasons", T_REASONS},
    [F_LOAD_SM_CLOCK] = {"under_load.sm_clock_MHz", T_U32},
    [F_LOAD_TEMP] = {"under_load.temperature_C", T_U32},
    [F_LOAD_POWER] = {"under_load.power_usage_mW", T_U32},
};

enum sysfield { S_DRIVER, S_NVML, S_CUDA, S_GPU_COUNT, S_INIT_ERROR, S_PCI_GPU_COUNT, S_KERNEL_MODULE, S_COUNT };

static const struct { const char *name; enum ftype type; } k_sysfields[S_COUNT] = {
    [S_DRIVER] = {"driver_version", T_STR},
    [S_NVML] = {"nvml_version", T_STR},
    [S_CUDA] = {"cuda_driver_version", T_INT},
    [S_GPU_COUNT] = {"gpu_count", T_U32},
    [S_INIT_ERROR] = {"init_error", T_RETCODE},
    /* Not an NVML answer: how many GPUs the machine has on its PCI bus (GPUs 0..N-1's bus ids), for
     * the lab and the tests that build a fake sysfs tree from the scenario. Default: gpu_count. */
    [S_PCI_GPU_COUNT] = {"pci_gpu_count", T_U32},
    /* Not an NVML answer: the loaded kernel module's version. The library is the user-space half of the driver:
     * when both versions are set and differ (a driver upgraded, not yet rebooted), nvmlInit fails with
     * NVML_ERROR_LIB_RM_VERSION_MISMATCH, "Driver/library version mismatch", as the real one does. */
    [S_KERNEL_MODULE] = {"kernel_module_version", T_STR},
};

/* Functions a `hang` / `fail` rule may name; per_gpu: the rule may say @gpuN. */
static const struct { const char *name; int per_gpu; } k_functions[] = {
    {"nvmlInit_v2", 0}, {"nvmlInitWithFlags", 0}, {"nvmlShutdown", 0},
    {"nvmlSystemGetDriverVersion", 0}, {"nvmlSystemGetNVMLVersion", 0},
    {"nvmlSystemGetCudaDriverVersion", 0}, {"nvmlSystemGetCudaDriverVersion_v2", 0},
    {"nvmlDeviceGetCount_v2", 0},
    {"nvmlDeviceGetHandleByIndex_v2", 1}, {"nvmlDeviceGetHandleByUUID", 1},
    {"nvmlDeviceGetHandleByPciBusId_v2", 1},
    {"nvmlDeviceGetIndex", 1}, {"nvmlDeviceGetMinorNumber", 1}, {"nvmlDeviceGetName", 1},
    {"nvmlDeviceGetUUID", 1}, {"nvmlDeviceGetSerial", 1}, {"nvmlDeviceGetPciInfo_v3", 1},
    {"nvmlDeviceGetVbiosVersion", 1}, {"nvmlDeviceGetBoardPartNumber", 1},
    {"nvmlDeviceGetInforomImageVersion", 1},
    {"nvmlDeviceGetMemoryInfo", 1}, {"nvmlDeviceGetMemoryInfo_v2", 1},
    {"nvmlDeviceGetCudaComputeCapability", 1}, {"nvmlDeviceGetPersistenceMode", 1},
    {"nvmlDeviceGetMigMode", 1}, {"nvmlDeviceGetEccMode", 1},
    {"nvmlDeviceGetTotalEccErrors", 1}, {"nvmlDeviceGetRetiredPages", 1},
    {"nvmlDeviceGetRetiredPagesPendingStatus", 1}, {"nvmlDeviceGetRemappedRows", 1},
    {"nvmlDeviceGetCurrentClocksEventReasons", 1},
    {"nvmlDeviceGetCurrentClocksThrottleReasons", 1}, {"nvmlDeviceGetClockInfo", 1},
    {"nvmlDeviceGetTemperature", 1}, {"nvmlDeviceGetTemperatureV", 1},
    {"nvmlDeviceGetTemperatureThreshold", 1}, {"nvmlDeviceGetPowerUsage", 1},
    {"nvmlDeviceGetEnforcedPowerLimit", 1}, {"nvmlDeviceGetCurrPcieLinkGeneration", 1},
    {"nvmlDeviceGetMaxPcieLinkGeneration", 1}, {"nvmlDeviceGetCurrPcieLinkWidth", 1},
    {"nvmlDeviceGetMaxPcieLinkWidth", 1}, {"nvmlDeviceGetNvLinkState", 1},
    {"nvmlDeviceGetNumaNodeId", 1}, {"nvmlDeviceGetGpuFabricInfo", 1},
    {"nvmlDeviceGetGpuFabricInfoV", 1}, {"nvmlDeviceGetComputeRunningProcesses_v3", 1},
    {"nvmlDeviceGetGraphicsRunningProcesses_v3", 1},
};
#define K_FUNCTION_COUNT (sizeof k_functions / sizeof k_functions[0])

static const struct { nvmlReturn_t code; const char *name; const char *text; } k_errors[] = {
    {NVML_SUCCESS, "NVML_SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE", "Interrupt Request Issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM",
     "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
     "The requested vgpu operation is not available on target device, because ECC is enabled"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES",
     "Ran out of critical resources, other than memory"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
     "Argument version mismatch"},
    {NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED", "Deprecated"},
    {NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY", "System not ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND", "No GPUs were found"},
    {NVML_ERROR_INVALID_STATE, "NVML_ERROR_INVALID_STATE", "Invalid state"},
    {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
     "Reset type not supported"},
    {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", "Unknown Error"},
};
#define K_ERROR_COUNT (sizeof k_errors / sizeof k_errors[0])

enum rule_action { RULE_HANG, RULE_FAIL };

typedef struct {
    char fn[64];
    int gpu; /* -1: any GPU (or a system call) */
    enum rule_action action;
    nvmlReturn_t code;
} fake_rule;

typedef struct {
    fake_val sys[S_COUNT];
    unsigned int gpu_count;
    unsigned char lost[FAKE_MAX_GPUS];
    fake_rule rules[FAKE_MAX_RULES];
    int nrules;
    fake_val gpu[FAKE_MAX_GPUS][F_COUNT];
} fake_scenario;

/* A handle never moves: a reload changes what g_scn says about GPU N, not where its handle points
 * (set once, by handles_init, when the library is loaded). */
struct nvmlDevice_st {
    unsigned int magic;
    unsigned int index;
    fake_val *f; /* g_scn.gpu[index] */
};

static struct nvmlDevice_st g_gpus[FAKE_MAX_GPUS];

/* The live scenario. A file is parsed into g_next (under g_load_lock) and copied here under the write
 * lock of g_scn_rw; each call reads it under the read lock, from its init check until it returns, so
 * no call sees half of one scenario and half of the next. Writer-preferring: a stream of overlapping
 * calls cannot starve a reload (no call takes the read lock twice, which that kind forbids). */
static fake_scenario g_scn;
static fake_scenario g_next;
#ifdef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
static pthread_rwlock_t g_scn_rw = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
#else
static pthread_rwlock_t g_scn_rw = PTHREAD_RWLOCK_INITIALIZER;
#endif
/* The largest gpu_count since init (under g_scn_rw): a handle at or above today's gpu_count but
 * below this is a GPU that went away under a running process, and answers as a lost one. */
static unsigned int g_known_count;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;   /* protected by g_lock */
static int g_initialized; /* read with __atomic_load_n outside the lock */

/* The files behind g_scn, for maybe_reload. Lock order: g_lock, g_load_lock, g_scn_rw. */
typedef struct {
    int set; /* 0: the file does not exist (an include_if_present file not there is a version too) */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_version;

typedef struct {
    char path[PATH_MAX]; /* absolute: the process may change directory before the file changes */
    file_version v;      /* taken before the file was read */
} file_seen;

/* Every file one parse read (or looked for), the scenario file first. */
typedef struct {
    int n;
    file_seen f[FAKE_MAX_FILES];
} file_set;

static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char path[PATH_MAX];
    file_set loaded;   /* the files of g_scn; none: nothing to reload */
    file_set rejected; /* the files of the last version refused, so that it is said once, not at every call */
} g_src;               /* protected by g_load_lock */
static file_set g_next_files; /* the files of g_next, filled by the parse (under g_load_lock) */
static long long g_next_check_ns; /* CLOCK_MONOTONIC; read with __atomic_load_n outside the lock */

__attribute__((constructor)) static void handles_init(void)
{
    unsigned int i;
    for (i = 0; i < FAKE_MAX_GPUS; i++) {
        g_gpus[i].magic = FAKE_MAGIC;
        g_gpus[i].index = i;
        g_gpus[i].f = g_scn.gpu[i];
    }
}

/* ------------------------------------------------------------------------ */
/* Small parsers (used both to validate at load and to answer calls)        */
/* ------------------------------------------------------------------------ */

static int parse_u64(const char *s, unsigned long long *out)
{
    char *end = NULL;
    unsigned long long v;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0' || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno != 0 || end == s)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_u32(const char *s, unsigned int *out)
{
    unsigned long long v;
    if (parse_u64(s, &v) != 0 || v > UINT_MAX)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    unsigned long long v;
    if (parse_u64(s, &v) != 0 || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"on", "enabled", "yes", "true", "1"};
    static const char *no[] = {"off", "disabled", "no", "false", "0"};
    size_t i;
    for (i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_cc(const char *s, int *major, int *minor)
{
    int n = 0;
    if (sscanf(s, "%d.%d%n", major, minor, &n) != 2 || s[n] != '\0' || *major < 0 || *minor < 0)
        return -1;
    return 0;
}

static int parse_retcode(const char *s, nvmlReturn_t *out)
{
    size_t i;
    unsigned int v;
    if (parse_u32(s, &v) == 0) {
        for (i = 0; i < K_ERROR_COUNT; i++) {
            if ((unsigned int)k_errors[i].code == v) {
                *out = k_errors[i].code;
                return 0;
            }
        }
        return -1;
    }
    for (i = 0; i < K_ERROR_COUNT; i++) {
        const char *name = k_errors[i].name;
        const char *shortname = strncmp(name, "NVML_ERROR_", 11) == 0 ? name + 11 : name + 5;
        if (strcasecmp(s, name) == 0 || strcasecmp(s, shortname) == 0) {
            *out = k_errors[i].code;
            return 0;
        }
    }
    return -1;
}

static int parse_fabstate(const char *s, unsigned int *out)
{
    static const char *names[] = {"not_supported", "not_started", "in_progress", "completed"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (unsigned int)i;
            return 0;
        }
    }
    if (parse_u32(s, out) == 0 && *out <= 255)
        return 0;
    return -1;
}

/* Clocks event reasons: a number, or names joined by | , + or spaces. */
static int parse_reasons(const char *s, unsigned long long *out)
{
    static const struct { const char *name; unsigned long long bit; } names[] = {
        {"none", nvmlClocksEventReasonNone},
        {"gpu_idle", nvmlClocksEventReasonGpuIdle},
        {"applications_clocks_setting", nvmlClocksEventReasonApplicationsClocksSetting},
        {"sw_power_cap", nvmlClocksEventReasonSwPowerCap},
        {"hw_slowdown", nvmlClocksThrottleReasonHwSlowdown},
        {"sync_boost", nvmlClocksEventReasonSyncBoost},
        {"sw_thermal_slowdown", nvmlClocksEventReasonSwThermalSlowdown},
        {"hw_thermal_slowdown", nvmlClocksThrottleReasonHwThermalSlowdown},
        {"hw_power_brake_slowdown", nvmlClocksThrottleReasonHwPowerBrakeSlowdown},
        {"display_clock_setting", nvmlClocksEventReasonDisplayClockSetting},
    };
    char buf[FAKE_VAL_LEN];
    char *tok, *save = NULL;
    unsigned long long acc = 0;
    int any = 0;
    if (parse_u64(s, out) == 0)
        return 0;
    if (strlen(s) >= sizeof buf)
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    for (tok = strtok_r(buf, "|,+ \t", &save); tok; tok = strtok_r(NULL, "|,+ \t", &save)) {
        size_t i;
        int found = 0;
        for (i = 0; i < sizeof names / sizeof names[0]; i++) {
            if (strcasecmp(tok, names[i].name) == 0) {
                acc |= names[i].bit;
                found = 1;
                break;
            }
        }
        if (!found)
            return -1;
        any = 1;
    }
    if (!any)
        return -1;
    *out = acc;
    return 0;
}

/* A list of numbers separated by commas/spaces, or "none". */
/* The items of a list value ("a, b c"; `none` is no item): pointers into `buf` (FAKE_VAL_LEN bytes). */
static int split_items(const char *s, char *buf, char **items, unsigned int cap, unsigned int *count)
{
    char *tok, *save = NULL;
    unsigned int n = 0;
    if (strcasecmp(s, "none") == 0) {
        *count = 0;
        return 0;
    }
    if (strlen(s) >= FAKE_VAL_LEN)
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    for (tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (n >= cap)
            return -1;
        items[n++] = tok;
    }
    if (n == 0)
        return -1;
    *count = n;
    return 0;
}

static int parse_list(const char *s, unsigned long long *items, unsigned int cap, unsigned int *count)
{
    char buf[FAKE_VAL_LEN];
    char *tokens[FAKE_MAX_LIST];
    unsigned int i;
    if (cap > FAKE_MAX_LIST || split_items(s, buf, tokens, cap, count) != 0)
        return -1;
    for (i = 0; i < *count; i++)
        if (parse_u64(tokens[i], &items[i]) != 0)
            return -1;
    return 0;
}

/* "PID:BYTES PID:na ..." (na = NVML_VALUE_NOT_AVAILABLE) or "none". */
static int parse_procs(const char *s, unsigned int *pids, unsigned long long *bytes, unsigned int cap,
                       unsigned int *count)
{
    char buf[FAKE_VAL_LEN];
    char *tokens[FAKE_MAX_LIST];
    unsigned int i;
    if (cap > FAKE_MAX_LIST || split_items(s, buf, tokens, cap, count) != 0)
        return -1;
    for (i = 0; i < *count; i++) {
        char *colon = strchr(tokens[i], ':');
        if (!colon)
            return -1;
        *colon = '\0';
        if (parse_u32(tokens[i], &pids[i]) != 0)
            return -1;
        if (strcasecmp(colon + 1, "na") == 0)
            bytes[i] = (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
        else if (parse_u64(colon + 1, &bytes[i]) != 0)
            return -1;
    }
    return 0;
}

/* "DDDDDDDD:BB:DD.F" (any hex widths); returns the four numbers. */
static int parse_busid(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev,
                       unsigned int *fn)
{
    int n = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", dom, bus, dev, fn, &n) != 4 || s[n] != '\0')
        return -1;
    if (*bus > 0xff || *dev > 0x1f || *fn > 7)
        return -1;
    return 0;
}

static int parse_hex128(const char *s, unsigned char out[16])
{
    int nibbles = 0;
    memset(out, 0, 16);
    for (; *s; s++) {
        int v;
        if (*s == '-')
            continue;
        if (!isxdigit((unsigned char)*s) || nibbles >= 32)
            return -1;
        v = isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
        out[nibbles / 2] = (unsigned char)(out[nibbles / 2] | (nibbles % 2 ? v : v << 4));
        nibbles++;
    }
    return nibbles == 32 ? 0 : -1;
}

static int validate_type(enum ftype t, const char *s)
{
    unsigned long long u64, list[FAKE_MAX_LIST];
    unsigned int u32, a, b, c, d, count;
    int i32, mj, mn;
    unsigned char raw[16];
    nvmlReturn_t rc;
    switch (t) {
    case T_STR: return 0;
    case T_U32: return parse_u32(s, &u32);
    case T_U64: return parse_u64(s, &u64);
    case T_INT: return parse_int(s, &i32);
    case T_BOOL: return parse_bool(s, &i32);
    case T_CC: return parse_cc(s, &mj, &mn);
    case T_REASONS: return parse_reasons(s, &u64);
    case T_PAGES: return parse_list(s, list, FAKE_MAX_LIST, &count);
    case T_LINKS:
        if (parse_list(s, list, FAKE_MAX_LIST, &count) != 0)
            return -1;
        for (a = 0; a < count; a++)
            if (list[a] >= NVML_NVLINK_MAX_LINKS)
                return -1;
        return 0;
    case T_BUSID: return parse_busid(s, &a, &b, &c, &d);
    case T_HEX128: return parse_hex128(s, raw);
    case T_FABSTATE: return parse_fabstate(s, &u32);
    case T_RETCODE: return parse_retcode(s, &rc);
    case T_PROCS: {
        unsigned int pids[FAKE_MAX_LIST];
        return parse_procs(s, pids, list, FAKE_MAX_LIST, &count);
    }
    }
    return -1;
}

static const char *type_hint(enum ftype t)
{
    switch (t) {
    case T_STR: return "text";
    case T_U32: return "an unsigned 32-bit number";
    case T_U64: return "an unsigned 64-bit number";
    case T_INT: return "a non-negative number";
    case T_BOOL: return "on/off";
    case T_CC: return "MAJOR.MINOR";
    case T_REASONS: return "a number or names such as hw_slowdown|hw_thermal_slowdown";
    case T_PAGES: return "a list of page addresses or none";
    case T_LINKS: return "a list of NVLink indices below 36, or none";
    case T_BUSID: return "a PCI bus id such as 00000000:18:00.0";
    case T_HEX128: return "32 hex digits (dashes allowed)";
    case T_FABSTATE: return "not_supported, not_started, in_progress or completed";
    case T_RETCODE: return "an NVML return code (number or NVML_ERROR_* name)";
    case T_PROCS: return "a list of PID:BYTES (BYTES may be na), or none";
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* Scenario loading                                                          */
/* ------------------------------------------------------------------------ */

static char *trim(char *s)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int set_val(fake_val *v, const char *value)
{
    size_t n = strlen(value);
    if (n >= sizeof v->s)
        return -1;
    if (strcasecmp(value, "unsupported") == 0) {
        v->state = VAL_UNSUPPORTED;
        v->s[0] = '\0';
        return 0;
    }
    memcpy(v->s, value, n + 1);
    v->state = VAL_SET;
    return 0;
}

static int find_function(const char *name)
{
    size_t i;
    for (i = 0; i < K_FUNCTION_COUNT; i++)
        if (strcmp(k_functions[i].name, name) == 0)
            return (int)i;
    return -1;
}

#define PERR(path, line, ...)                                      \
    do {                                                           \
        fprintf(stderr, "fakenvml: %s:%d: ", (path), (line));      \
        fprintf(stderr, __VA_ARGS__);                              \
        fputc('\n', stderr);                                       \
    } while (0)

/* "FUNC[@gpuN]" for hang, "FUNC[@gpuN] CODE" for fail. */
static int add_rule(fake_scenario *scn, const char *path, int line, const char *key, const char *value,
                    enum rule_action action)
{
    char buf[FAKE_VAL_LEN];
    char *fn, *at, *rest = NULL;
    fake_rule *r;
    int fi;
    if (scn->nrules >= FAKE_MAX_RULES) {
        PERR(path, line, "too many hang/fail rules (max %d)", FAKE_MAX_RULES);
        return -1;
    }
    if (strlen(value) >= sizeof buf) {
        PERR(path, line, "value of '%s' too long", key);
        return -1;
    }
    memcpy(buf, value, strlen(value) + 1);
    fn = buf;
    if (action == RULE_FAIL) {
        rest = fn + strcspn(fn, " \t");
        if (*rest == '\0') {
            PERR(path, line, "'fail' needs 'FUNCTION[@gpuN] CODE', got '%s'", value);
            return -1;
        }
        *rest++ = '\0';
        rest = trim(rest);
    }
    r = &scn->rules[scn->nrules];
    memset(r, 0, sizeof *r);
    r->gpu = -1;
    r->action = action;
    at = strchr(fn, '@');
    if (at) {
        unsigned int idx;
        *at++ = '\0';
        if (strncmp(at, "gpu", 3) != 0 || parse_u32(at + 3, &idx) != 0 || idx >= FAKE_MAX_GPUS) {
            PERR(path, line, "bad GPU in '%s': expected @gpuN with N < %d", value, FAKE_MAX_GPUS);
            return -1;
        }
        r->gpu = (int)idx;
    }
    if (strcmp(fn, "*") == 0) {
        /* every per-GPU function, for one GPU only: a GPU that answers nothing right */
        if (r->gpu < 0) {
            PERR(path, line, "'*' needs a GPU: '*@gpuN'");
            return -1;
        }
        fi = -1;
    } else if ((fi = find_function(fn)) < 0) {
        PERR(path, line, "'%s' names unknown function '%s'", key, fn);
        return -1;
    }
    if (fi >= 0 && r->gpu >= 0 && !k_functions[fi].per_gpu) {
        PERR(path, line, "'%s' is not a per-GPU function; drop the @gpu part", fn);
        return -1;
    }
    if (action == RULE_FAIL && parse_retcode(rest, &r->code) != 0) {
        PERR(path, line, "bad return code '%s' in 'fail'", rest);
        return -1;
    }
    snprintf(r->fn, sizeof r->fn, "%s", fn);
    scn->nrules++;
    return 0;
}

static int parse_file(fake_scenario *scn, const char *path, int depth);
static int track_file(const char *path, file_version *v);

static int handle_line(fake_scenario *scn, const char *path, int line, char *key, char *value, int depth)
{
    size_t i;
    /* include_if_present: what a lab host's installed driver package says (lab/nvidia_repo), absent before */
    if (strcmp(key, "include") == 0 || strcmp(key, "include_if_present") == 0) {
        char inc[PATH_MAX];
        const char *slash = strrchr(path, '/');
        int n;
        if (value[0] == '/' || !slash)
            n = snprintf(inc, sizeof inc, "%s", value);
        else
            n = snprintf(inc, sizeof inc, "%.*s/%s", (int)(slash - path), path, value);
        if (n < 0 || (size_t)n >= sizeof inc) {
            PERR(path, line, "include path too long");
            return -1;
        }
        if (key[7] == '_') {
            file_version v;
            if (track_file(inc, &v) != 0) /* absent is a version too: its arrival is a change */
                return -1;
            if (!v.set)
                return 0;
        }
        return parse_file(scn, inc, depth + 1);
    }
    if (strcmp(key, "hang") == 0)
        return add_rule(scn, path, line, key, value, RULE_HANG);
    if (strcmp(key, "fail") == 0)
        return add_rule(scn, path, line, key, value, RULE_FAIL);
    if (strcmp(key, "lost") == 0) {
        unsigned long long list[FAKE_MAX_LIST];
        unsigned int count, j;
        if (parse_list(value, list, FAKE_MAX_LIST, &count) != 0) {
            PERR(path, line, "bad value for 'lost': '%s' (expected GPU indices or none)", value);
            return -1;
        }
        for (j = 0; j < count; j++) {
            if (list[j] >= FAKE_MAX_GPUS) {
                PERR(path, line, "'lost' GPU %llu out of range", list[j]);
                return -1;
            }
            scn->lost[list[j]] = 1;
        }
        return 0;
    }
    for (i = 0; i < S_COUNT; i++) {
        if (strcmp(key, k_sysfields[i].name) == 0) {
            if (strcasecmp(value, "unsupported") != 0 && validate_type(k_sysfields[i].type, value) != 0) {
                PERR(path, line, "bad value for '%s': '%s' (expected %s)", key, value,
                     type_hint(k_sysfields[i].type));
                return -1;
            }
            if (set_val(&scn->sys[i], value) != 0) {
                PERR(path, line, "value of '%s' too long", key);
                return -1;
            }
            return 0;
        }
    }
    if (strncmp(key, "gpu.", 4) == 0) {
        const char *p = key + 4;
        const char *dot = strchr(p, '.');
        int all = 0;
        unsigned int idx = 0;
        if (dot) {
            char num[16];
            size_t len = (size_t)(dot - p);
            if (len == 1 && p[0] == '*') {
                all = 1;
            } else {
                if (len == 0 || len >= sizeof num) {
                    PERR(path, line, "bad GPU index in key '%s'", key);
                    return -1;
                }
                memcpy(num, p, len);
                num[len] = '\0';
                if (!isdigit((unsigned char)num[0]) || parse_u32(num, &idx) != 0 || idx >= FAKE_MAX_GPUS) {
                    PERR(path, line, "bad GPU index in key '%s' (0..%d or *)", key, FAKE_MAX_GPUS - 1);
                    return -1;
                }
            }
            for (i = 0; i < F_COUNT; i++) {
                if (strcmp(dot + 1, k_fields[i].name) == 0) {
                    unsigned int g;
                    if (strcasecmp(value, "unsupported") != 0 && validate_type(k_fields[i].type, value) != 0) {
                        PERR(path, line, "bad value for '%s': '%s' (expected %s)", key, value,
                             type_hint(k_fields[i].type));
                        return -1;
                    }
                    for (g = all ? 0 : idx; g < (all ? FAKE_MAX_GPUS : idx + 1); g++) {
                        if (set_val(&scn->gpu[g][i], value) != 0) {
                            PERR(path, line, "value of '%s' too long", key);
                            return -1;
                        }
                    }
                    return 0;
                }
            }
        }
    }
    PERR(path, line, "unknown key '%s'", key);
    return -1;
}

static int parse_file(fake_scenario *scn, const char *path, int depth)
{
    FILE *f;
    file_version version;
    char buf[FAKE_LINE_LEN];
    int line = 0, rc = 0;
    if (depth > FAKE_MAX_INCLUDE_DEPTH) {
        fprintf(stderr, "fakenvml: %s: includes nested deeper than %d\n", path, FAKE_MAX_INCLUDE_DEPTH);
        return -1;
    }
    if (track_file(path, &version) != 0)
        return -1;
    f = fopen(path, "re");
    if (!f) {
        fprintf(stderr, "fakenvml: cannot read scenario %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(buf, sizeof buf, f)) {
        char *s, *eq, *key, *value, *hash;
        size_t n = strlen(buf);
        line++;
        if (n == sizeof buf - 1 && buf[n - 1] != '\n' && !feof(f)) {
            PERR(path, line, "line too long (max %d)", FAKE_LINE_LEN - 2);
            rc = -1;
            break;
        }
        hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        s = trim(buf);
        if (*s == '\0')
            continue;
        eq = strchr(s, '=');
        if (!eq) {
            PERR(path, line, "expected 'key = value', got '%s'", s);
            rc = -1;
            break;
        }
        *eq = '\0';
        key = trim(s);
        value = trim(eq + 1);
        n = strlen(value);
        if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
            value[n - 1] = '\0';
            value++;
        }
        rc = handle_line(scn, path, line, key, value, depth);
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "fakenvml: error reading %s\n", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}

/* Cross-key checks once everything is read. */
static int scenario_check(fake_scenario *scn, const char *path)
{
    unsigned int i, j;
    if (scn->sys[S_GPU_COUNT].state != VAL_SET) {
        fprintf(stderr, "fakenvml: %s: 'gpu_count' is required\n", path);
        return -1;
    }
    if (parse_u32(scn->sys[S_GPU_COUNT].s, &scn->gpu_count) != 0 || scn->gpu_count > FAKE_MAX_GPUS) {
        fprintf(stderr, "fakenvml: %s: 'gpu_count' must be 0..%d\n", path, FAKE_MAX_GPUS);
        return -1;
    }
    if (scn->sys[S_PCI_GPU_COUNT].state == VAL_SET) {
        unsigned int on_bus = 0;
        if (parse_u32(scn->sys[S_PCI_GPU_COUNT].s, &on_bus) != 0 || on_bus > FAKE_MAX_GPUS ||
            on_bus < scn->gpu_count) {
            fprintf(stderr, "fakenvml: %s: 'pci_gpu_count' must be gpu_count (%u)..%d\n", path, scn->gpu_count,
                    FAKE_MAX_GPUS);
            return -1;
        }
    }
    for (i = 0; i < FAKE_MAX_GPUS; i++) {
        if (scn->lost[i] && i >= scn->gpu_count) {
            fprintf(stderr, "fakenvml: %s: 'lost' names GPU %u but gpu_count is %u\n", path, i,
                    scn->gpu_count);
            return -1;
        }
    }
    for (j = 0; j < (unsigned int)scn->nrules; j++) {
        if (scn->rules[j].gpu >= 0 && (unsigned int)scn->rules[j].gpu >= scn->gpu_count) {
            fprintf(stderr, "fakenvml: %s: rule for %s names GPU %d but gpu_count is %u\n", path,
                    scn->rules[j].fn, scn->rules[j].gpu, scn->gpu_count);
            return -1;
        }
    }
    for (i = 0; i < scn->gpu_count; i++) {
        const fake_val *f = scn->gpu[i];
        unsigned long long total = 0, res = 0, used = 0, list[FAKE_MAX_LIST];
        unsigned int links = 0, count = 0;
        if (f[F_MEM_TOTAL].state == VAL_SET) {
            parse_u64(f[F_MEM_TOTAL].s, &total);
            if (f[F_MEM_RESERVED].state == VAL_SET)
                parse_u64(f[F_MEM_RESERVED].s, &res);
            if (f[F_MEM_USED].state == VAL_SET)
                parse_u64(f[F_MEM_USED].s, &used);
            if (res > total || used > total - res) {
                fprintf(stderr, "fakenvml: %s: gpu.%u: reserved + used memory exceed total\n", path, i);
                return -1;
            }
        }
        if (f[F_NVLINK_DOWN].state == VAL_SET) {
            if (f[F_NVLINK_COUNT].state == VAL_SET)
                parse_u32(f[F_NVLINK_COUNT].s, &links);
            parse_list(f[F_NVLINK_DOWN].s, list, FAKE_MAX_LIST, &count);
            for (j = 0; j < count; j++) {
                if (list[j] >= links) {
                    fprintf(stderr, "fakenvml: %s: gpu.%u.nvlink_down names link %llu but nvlink_count is %u\n",
                            path, i, list[j], links);
                    return -1;
                }
            }
        }
        if (f[F_NVLINK_COUNT].state == VAL_SET) {
            parse_u32(f[F_NVLINK_COUNT].s, &links);
            if (links > NVML_NVLINK_MAX_LINKS) {
                fprintf(stderr, "fakenvml: %s: gpu.%u.nvlink_count above %d\n", path, i, NVML_NVLINK_MAX_LINKS);
                return -1;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loading at init, and again when the file changes under a running process */
/* ------------------------------------------------------------------------ */

static void file_version_of(const char *path, file_version *v)
{
    struct stat st;
    memset(v, 0, sizeof *v);
    if (stat(path, &st) != 0)
        return;
    v->set = 1;
    v->dev = st.st_dev;
    v->ino = st.st_ino;
    v->size = st.st_size;
    v->mtime = st.st_mtim;
}

/* Absent and absent are the same version: an include_if_present file that stays away is no change. */
static int same_version(const file_version *a, const file_version *b)
{
    if (!a->set || !b->set)
        return a->set == b->set;
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* PATH made absolute into OUT (PATH_MAX bytes): 0, or -1 when it does not fit. */
static int absolute_path(const char *path, char *out)
{
    char cwd[PATH_MAX];
    int n;
    if (path[0] == '/')
        n = snprintf(out, PATH_MAX, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        n = snprintf(out, PATH_MAX, "%s/%s", cwd, path);
    else
        n = -1;
    return n > 0 && n < PATH_MAX ? 0 : -1;
}

/* The parse is about to read (or look for) PATH: its version into *V, and into g_next_files (once per path),
 * taken before the read so that a file rewritten during the parse differs from the one recorded and is read
 * again. The caller holds g_load_lock. */
static int track_file(const char *path, file_version *v)
{
    char abs[PATH_MAX];
    int i;
    file_version_of(path, v);
    if (absolute_path(path, abs) != 0) {
        fprintf(stderr, "fakenvml: %s: path too long to follow\n", path);
        return -1;
    }
    for (i = 0; i < g_next_files.n; i++)
        if (strcmp(g_next_files.f[i].path, abs) == 0)
            return 0; /* read twice: the first version stands, a change since is seen at the next check */
    if (g_next_files.n >= FAKE_MAX_FILES) {
        fprintf(stderr, "fakenvml: %s: the scenario reads more than %d files\n", path, FAKE_MAX_FILES);
        return -1;
    }
    memcpy(g_next_files.f[g_next_files.n].path, abs, sizeof abs);
    g_next_files.f[g_next_files.n].v = *v;
    g_next_files.n++;
    return 0;
}

/* Whether any file of SET is not the version it was (appeared, went away, changed). */
static int files_changed(const file_set *set)
{
    file_version now;
    int i;
    for (i = 0; i < set->n; i++) {
        file_version_of(set->f[i].path, &now);
        if (!same_version(&now, &set->f[i].v))
            return 1;
    }
    return 0;
}

static void files_copy(file_set *to, const file_set *from)
{
    to->n = from->n;
    memcpy(to->f, from->f, (size_t)from->n * sizeof from->f[0]);
}

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Parse and check PATH into g_next, its files into g_next_files (the caller holds g_load_lock): 0 when it
 * loads. */
static int parse_next(const char *path)
{
    memset(&g_next, 0, sizeof g_next);
    g_next_files.n = 0;
    if (parse_file(&g_next, path, 0) != 0 || scenario_check(&g_next, path) != 0)
        return -1;
    return 0;
}

/* g_next becomes the live scenario. `at_init`: no handle from before counts any more. */
static void scenario_swap(int at_init)
{
    pthread_rwlock_wrlock(&g_scn_rw);
    g_scn = g_next;
    if (at_init || g_scn.gpu_count > g_known_count)
        g_known_count = g_scn.gpu_count;
    pthread_rwlock_unlock(&g_scn_rw);
}

/* nvmlInit's load (the caller holds g_load_lock); each file's version is taken before it is read
 * (track_file). */
static int load_scenario(const char *path)
{
    g_src.loaded.n = 0;
    g_src.rejected.n = 0;
    if (parse_next(path) != 0)
        return -1;
    scenario_swap(1);
    /* a relative path made absolute: the process may change directory before the file does */
    if (absolute_path(path, g_src.path) == 0)
        files_copy(&g_src.loaded, &g_next_files);
    __atomic_store_n(&g_next_check_ns, monotonic_ns() + FAKE_RELOAD_NS, __ATOMIC_RELAXED);
    return 0;
}

/* A process that stays initialised sees its scenario change, as a watcher that called nvmlInit once
 * sees a real GPU's counters step. At the start of a call, at most once per FAKE_RELOAD_NS, a scenario
 * one of whose files (the scenario file or any file it includes) is not the version loaded (device,
 * inode, size, mtime; or absent) is read again and swapped in. A version that does not load leaves the
 * live scenario in place and is said once on stderr (until one of the files it read changes again); a
 * scenario file gone (a lab host's, between two installs) leaves it silently. Never waits for another
 * thread's check or for an init. */
static void maybe_reload(void)
{
    long long now = monotonic_ns();
    file_version v;
    if (now < __atomic_load_n(&g_next_check_ns, __ATOMIC_RELAXED))
        return;
    if (pthread_mutex_trylock(&g_load_lock) != 0)
        return;
    /* again under the lock: another thread may have checked since */
    if (g_src.loaded.n > 0 && now >= __atomic_load_n(&g_next_check_ns, __ATOMIC_RELAXED)) {
        __atomic_store_n(&g_next_check_ns, now + FAKE_RELOAD_NS, __ATOMIC_RELAXED);
        file_version_of(g_src.path, &v);
        if (v.set && files_changed(&g_src.loaded) && (g_src.rejected.n == 0 || files_changed(&g_src.rejected))) {
            if (parse_next(g_src.path) == 0) {
                scenario_swap(0);
                files_copy(&g_src.loaded, &g_next_files);
            } else {
                fprintf(stderr, "fakenvml: scenario %s rejected; keeping the one loaded\n", g_src.path);
                files_copy(&g_src.rejected, &g_next_files);
            }
        }
    }
    pthread_mutex_unlock(&g_load_lock);
}

/* ------------------------------------------------------------------------ */
/* Call plumbing: trace, init check, handle check, hang/fail rules, lost     */
/* ------------------------------------------------------------------------ */

static void trace(const char *fn, long idx)
{
    const char *path = getenv("FAKENVML_TRACE");
    char line[160];
    int fd, n;
    if (!path || !*path)
        return;
    if (idx >= 0)
        n = snprintf(line, sizeof line, "%s gpu=%ld\n", fn, idx);
    else
        n = snprintf(line, sizeof line, "%s\n", fn);
    if (n <= 0 || (size_t)n >= sizeof line)
        return;
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) < 0) {
        /* nothing useful to do: tracing is best effort */
    }
    close(fd);
}

static int is_initialized(void)
{
    return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE);
}

static void hang_forever(void)
{
    for (;;)
        pause();
}

static void scn_read_end(int *held)
{
    if (*held)
        pthread_rwlock_unlock(&g_scn_rw);
    *held = 0;
}

/* The read side of g_scn_rw, as a variable of the function that answers: scn_read_begin takes the
 * lock, and every return from that function drops it (the cleanup attribute of GCC and Clang). */
#define SCN_READER(held) int held __attribute__((cleanup(scn_read_end))) = 0

/* After the init check: the reload first (it needs the write lock), then the read lock. */
static void scn_read_begin(int *held)
{
    maybe_reload();
    pthread_rwlock_rdlock(&g_scn_rw);
    *held = 1;
}

/* The first rule that matches decides (file order): NVML_SUCCESS (no rule, or a `fail` rule with
 * code NVML_SUCCESS, which exempts a call from a later rule), a `fail` code, or never returns
 * (`hang`). A `*@gpuN` rule matches every per-GPU call about GPU N. A hang drops the read lock
 * first: a thread hung forever must not hold off every later reload. */
static nvmlReturn_t apply_rules(const char *fn, int gpu, int *held)
{
    int i;
    for (i = 0; i < g_scn.nrules; i++) {
        const fake_rule *r = &g_scn.rules[i];
        if ((strcmp(r->fn, fn) != 0 && strcmp(r->fn, "*") != 0) || (r->gpu >= 0 && r->gpu != gpu))
            continue;
        if (r->action == RULE_HANG) {
            scn_read_end(held);
            hang_forever();
        }
        return r->code;
    }
    return NVML_SUCCESS;
}

static int handle_index(nvmlDevice_t dev)
{
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_gpus;
    size_t idx;
    if (p < base || p >= base + sizeof g_gpus)
        return -1;
    if ((p - base) % sizeof g_gpus[0] != 0)
        return -1;
    idx = (p - base) / sizeof g_gpus[0];
    if (g_gpus[idx].magic != FAKE_MAGIC || g_gpus[idx].index != idx)
        return -1;
    return (int)idx;
}

/* The enter functions take the read lock (into *held) once the call is past the init check. */
static nvmlReturn_t sys_enter(const char *fn, int *held)
{
    trace(fn, -1);
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    scn_read_begin(held);
    return apply_rules(fn, -1, held);
}

static nvmlReturn_t gpu_check(const char *fn, int idx, int *held)
{
    nvmlReturn_t r = apply_rules(fn, idx, held);
    if (r != NVML_SUCCESS)
        return r;
    if (g_scn.lost[idx])
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t dev_enter(const char *fn, nvmlDevice_t dev, struct nvmlDevice_st **out, int *held)
{
    int idx = handle_index(dev);
    nvmlReturn_t r;
    trace(fn, idx);
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    scn_read_begin(held);
    if (idx < 0 || (unsigned int)idx >= g_known_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* a GPU that went away under a running process (a reload with a smaller gpu_count) */
    if ((unsigned int)idx >= g_scn.gpu_count)
        return NVML_ERROR_GPU_IS_LOST;
    r = gpu_check(fn, idx, held);
    if (r != NVML_SUCCESS)
        return r;
    *out = &g_gpus[idx];
    return NVML_SUCCESS;
}

#define DEV_ENTER(dev, g)                                          \
    struct nvmlDevice_st *g = NULL;                                \
    SCN_READER(_held);                                             \
    do {                                                           \
        nvmlReturn_t _r = dev_enter(__func__, (dev), &g, &_held);  \
        if (_r != NVML_SUCCESS)                                    \
            return _r;                                             \
    } while (0)

#define SYS_ENTER()                                                \
    SCN_READER(_held);                                             \
    do {                                                           \
        nvmlReturn_t _r = sys_enter(__func__, &_held);             \
        if (_r != NVML_SUCCESS)                                    \
            return _r;                                             \
    } while (0)

/* Value getters: unset or `unsupported` -> NVML_ERROR_NOT_SUPPORTED. */
static nvmlReturn_t val_u64(const fake_val *v, unsigned long long *out)
{
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_u64(v->s, out) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t val_u32(const fake_val *v, unsigned int *out)
{
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_u32(v->s, out) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t val_bool(const fake_val *v, int *out)
{
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_bool(v->s, out) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* `pending` defaults to `current` when unset; `unsupported` stays unsupported. */
static nvmlReturn_t val_bool_pending(const fake_val *pending, const fake_val *current, int *out)
{
    return val_bool(pending->state == VAL_UNSET ? current : pending, out);
}

/* Optional numbers default to 0 when unset; `unsupported` stays unsupported. */
static nvmlReturn_t val_u64_or0(const fake_val *v, unsigned long long *out)
{
    if (v->state == VAL_UNSET) {
        *out = 0;
        return NVML_SUCCESS;
    }
    return val_u64(v, out);
}

static nvmlReturn_t copy_str(const fake_val *v, char *buf, unsigned int length)
{
    size_t n;
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    n = strlen(v->s);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, v->s, n + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t u32_field(const char *fn, nvmlDevice_t dev, enum field f, unsigned int *out)
{
    struct nvmlDevice_st *g = NULL;
    SCN_READER(held);
    nvmlReturn_t r = dev_enter(fn, dev, &g, &held);
    if (r != NVML_SUCCESS)
        return r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    return val_u32(&g->f[f], out);
}

static nvmlReturn_t str_field(const char *fn, nvmlDevice_t dev, enum field f, char *out, unsigned int length)
{
    struct nvmlDevice_st *g = NULL;
    SCN_READER(held);
    nvmlReturn_t r = dev_enter(fn, dev, &g, &held);
    if (r != NVML_SUCCESS)
        return r;
    return copy_str(&g->f[f], out, length);
}

/* ------------------------------------------------------------------------ */
/* Init / shutdown / errors                                                  */
/* ------------------------------------------------------------------------ */

/* What init answers once the scenario is loaded: a rule on the init function (*hang: never returns),
 * a kernel module of another version, init_error. Only at init: a reload under a running process
 * leaves these for the next nvmlInit. Reads g_next: the caller holds g_load_lock. */
static nvmlReturn_t init_outcome(const char *fn, int *hang)
{
    const fake_scenario *scn = &g_next;
    int i;
    *hang = 0;
    for (i = 0; i < scn->nrules; i++) {
        const fake_rule *r = &scn->rules[i];
        if (strcmp(r->fn, fn) != 0)
            continue;
        *hang = r->action == RULE_HANG;
        return r->code;
    }
    if (scn->sys[S_KERNEL_MODULE].state == VAL_SET && scn->sys[S_DRIVER].state == VAL_SET
        && strcmp(scn->sys[S_KERNEL_MODULE].s, scn->sys[S_DRIVER].s) != 0)
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    if (scn->sys[S_INIT_ERROR].state == VAL_SET) {
        nvmlReturn_t code = NVML_ERROR_UNKNOWN;
        parse_retcode(scn->sys[S_INIT_ERROR].s, &code);
        return code;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t do_init(const char *fn)
{
    const char *path;
    nvmlReturn_t r;
    int hang;
    trace(fn, -1);
    pthread_mutex_lock(&g_lock);
    if (g_refcount > 0) {
        g_refcount++;
        pthread_mutex_unlock(&g_lock);
        return NVML_SUCCESS;
    }
    path = getenv("FAKENVML_SCENARIO");
    if (!path || !*path)
        path = FAKE_DEFAULT_SCENARIO;
    pthread_mutex_lock(&g_load_lock);
    if (load_scenario(path) != 0) {
        pthread_mutex_unlock(&g_load_lock);
        fprintf(stderr, "fakenvml: scenario %s rejected; nvmlInit fails\n", path);
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNKNOWN;
    }
    r = init_outcome(fn, &hang);
    pthread_mutex_unlock(&g_load_lock);
    if (hang) {
        pthread_mutex_unlock(&g_lock);
        hang_forever();
    }
    if (r == NVML_SUCCESS) {
        g_refcount = 1;
        __atomic_store_n(&g_initialized, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(__func__);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(__func__);
}

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r;
    SCN_READER(held);
    trace(__func__, -1);
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    scn_read_begin(&held);
    r = apply_rules(__func__, -1, &held);
    scn_read_end(&held);
    if (r == NVML_SUCCESS && --g_refcount == 0)
        __atomic_store_n(&g_initialized, 0, __ATOMIC_RELEASE);
    /* The scenario stays in memory (a hung caller may still point into it);
     * the next successful init reloads it. */
    pthread_mutex_unlock(&g_lock);
    return r;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    size_t i;
    trace(__func__, -1);
    for (i = 0; i < K_ERROR_COUNT; i++)
        if (k_errors[i].code == result)
            return k_errors[i].text;
    return "Unknown Error";
}

/* ------------------------------------------------------------------------ */
/* System queries                                                            */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    SYS_ENTER();
    return copy_str(&g_scn.sys[S_DRIVER], version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    SYS_ENTER();
    return copy_str(&g_scn.sys[S_NVML], version, length);
}

static nvmlReturn_t cuda_version(int *out)
{
    const fake_val *v = &g_scn.sys[S_CUDA];
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_int(v->s, out) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    SYS_ENTER();
    return cuda_version(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    SYS_ENTER();
    return cuda_version(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    SYS_ENTER();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = g_scn.gpu_count;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r;
    SCN_READER(held);
    trace(__func__, index <= INT_MAX ? (long)index : -1);
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    scn_read_begin(&held);
    if (!device || index >= g_scn.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = gpu_check(__func__, (int)index, &held);
    if (r != NVML_SUCCESS)
        return r;
    *device = &g_gpus[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t handle_by(const char *fn, const char *key, nvmlDevice_t *device, int by_bus)
{
    unsigned int i, d1 = 0, b1 = 0, s1 = 0, f1 = 0;
    nvmlReturn_t r;
    SCN_READER(held);
    trace(fn, -1);
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    scn_read_begin(&held);
    if (!key || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (by_bus && parse_busid(key, &d1, &b1, &s1, &f1) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < g_scn.gpu_count; i++) {
        const fake_val *v = &g_scn.gpu[i][by_bus ? F_PCI_BUS_ID : F_UUID];
        int match;
        if (v->state != VAL_SET)
            continue;
        if (by_bus) {
            unsigned int d2, b2, s2, f2;
            match = parse_busid(v->s, &d2, &b2, &s2, &f2) == 0 && d1 == d2 && b1 == b2 && s1 == s2 && f1 == f2;
        } else {
            match = strcmp(v->s, key) == 0;
        }
        if (!match)
            continue;
        trace(fn, (long)i);
        r = gpu_check(fn, (int)i, &held);
        if (r != NVML_SUCCESS)
            return r;
        *device = &g_gpus[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return handle_by(__func__, uuid, device, 0);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return handle_by(__func__, pciBusId, device, 1);
}

/* ------------------------------------------------------------------------ */
/* Identity                                                                  */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEV_ENTER(device, g);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = g->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return u32_field(__func__, device, F_MINOR, minorNumber);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    return str_field(__func__, device, F_NAME, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    return str_field(__func__, device, F_UUID, uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    return str_field(__func__, device, F_SERIAL, serial, length);
}

/* The identity an RMA asks for (gpucheck rma): VBIOS, board part number, InfoROM image. */
nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return str_field(__func__, device, F_VBIOS, version, length);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    return str_field(__func__, device, F_BOARD_PART, partNumber, length);
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return str_field(__func__, device, F_INFOROM, version, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    unsigned int dom, bus, dev, fn, devid, subsys;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->f[F_PCI_BUS_ID].state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    if (parse_busid(g->f[F_PCI_BUS_ID].s, &dom, &bus, &dev, &fn) != 0)
        return NVML_ERROR_UNKNOWN;
    if ((r = val_u32(&g->f[F_PCI_DEVICE_ID], &devid)) != NVML_SUCCESS)
        return r;
    if ((r = val_u32(&g->f[F_PCI_SUBSYS_ID], &subsys)) != NVML_SUCCESS)
        return r;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             dom & 0xffffu, bus, dev);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, dom, bus, dev);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = devid;
    pci->pciSubSystemId = subsys;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    return u32_field(__func__, device, F_NUMA, node);
}

/* ------------------------------------------------------------------------ */
/* Memory, compute capability, modes                                         */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t memory_values(struct nvmlDevice_st *g, unsigned long long *total,
                                  unsigned long long *reserved, unsigned long long *used)
{
    nvmlReturn_t r;
    if ((r = val_u64(&g->f[F_MEM_TOTAL], total)) != NVML_SUCCESS)
        return r;
    if ((r = val_u64_or0(&g->f[F_MEM_RESERVED], reserved)) != NVML_SUCCESS)
        return r;
    return val_u64_or0(&g->f[F_MEM_USED], used);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total, reserved, used;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = memory_values(g, &total, &reserved, &used)) != NVML_SUCCESS)
        return r;
    /* v1 semantics: "used" is reserved plus allocated. */
    memory->total = total;
    memory->used = reserved + used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long total, reserved, used;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if ((r = memory_values(g, &total, &reserved, &used)) != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    int mj, mn;
    DEV_ENTER(device, g);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->f[F_CC].state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    if (parse_cc(g->f[F_CC].s, &mj, &mn) != 0)
        return NVML_ERROR_UNKNOWN;
    *major = mj;
    *minor = mn;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    int on;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_bool(&g->f[F_PERSIST], &on)) != NVML_SUCCESS)
        return r;
    *mode = on ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    int cur, pend;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_bool(&g->f[F_MIG], &cur)) != NVML_SUCCESS)
        return r;
    if ((r = val_bool_pending(&g->f[F_MIG_PENDING], &g->f[F_MIG], &pend)) != NVML_SUCCESS)
        return r;
    *currentMode = cur ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = pend ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    int cur, pend;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_bool(&g->f[F_ECC], &cur)) != NVML_SUCCESS)
        return r;
    if ((r = val_bool_pending(&g->f[F_ECC_PENDING], &g->f[F_ECC], &pend)) != NVML_SUCCESS)
        return r;
    *current = cur ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = pend ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Memory errors                                                             */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    enum field f;
    int ecc_on;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!eccCounts || (unsigned int)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned int)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* "Requires ECC Mode to be enabled" (nvml.h). */
    if ((r = val_bool(&g->f[F_ECC], &ecc_on)) != NVML_SUCCESS)
        return r;
    if (!ecc_on)
        return NVML_ERROR_NOT_SUPPORTED;
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        f = counterType == NVML_VOLATILE_ECC ? F_ECC_CV : F_ECC_CA;
    else
        f = counterType == NVML_VOLATILE_ECC ? F_ECC_UV : F_ECC_UA;
    return val_u64(&g->f[f], eccCounts);
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                       unsigned int *pageCount, unsigned long long *addresses)
{
    unsigned long long list[FAKE_MAX_LIST];
    unsigned int n = 0, i;
    const fake_val *v;
    DEV_ENTER(device, g);
    if (!pageCount || (unsigned int)cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    v = &g->f[cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ? F_RP_SBE : F_RP_DBE];
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    if (parse_list(v->s, list, FAKE_MAX_LIST, &n) != 0)
        return NVML_ERROR_UNKNOWN;
    /* Size query: *pageCount == 0 (addresses may be NULL). */
    if (*pageCount < n) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !addresses)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++)
        addresses[i] = list[i];
    *pageCount = n;
    return NVML_SUCCESS;
}

/* The processes on a GPU (nvmlProcessInfo_t: pid, bytes, MIG instance ids). Unset: none (an idle GPU);
 * `unsupported`: NOT_SUPPORTED. A size query (*infoCount too small) answers INSUFFICIENT_SIZE with the count. */
static nvmlReturn_t list_processes(const fake_val *v, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    unsigned int pids[FAKE_MAX_LIST], n = 0, i;
    unsigned long long bytes[FAKE_MAX_LIST];
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (v->state == VAL_UNSUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    if (v->state == VAL_SET && parse_procs(v->s, pids, bytes, FAKE_MAX_LIST, &n) != 0)
        return NVML_ERROR_UNKNOWN;
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++) {
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = bytes[i];
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    DEV_ENTER(device, g);
    return list_processes(&g->f[F_PROCS_COMPUTE], infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    DEV_ENTER(device, g);
    return list_processes(&g->f[F_PROCS_GRAPHICS], infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    int on;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!isPending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_bool(&g->f[F_RP_PENDING], &on)) != NVML_SUCCESS)
        return r;
    *isPending = on ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    unsigned int corr, unc;
    int pend, fail;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_u32(&g->f[F_RR_CORR], &corr)) != NVML_SUCCESS ||
        (r = val_u32(&g->f[F_RR_UNC], &unc)) != NVML_SUCCESS ||
        (r = val_bool(&g->f[F_RR_PENDING], &pend)) != NVML_SUCCESS ||
        (r = val_bool(&g->f[F_RR_FAIL], &fail)) != NVML_SUCCESS)
        return r;
    *corrRows = corr;
    *uncRows = unc;
    *isPending = (unsigned int)pend;
    *failureOccurred = (unsigned int)fail;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Clocks, thermals, power                                                   */
/* ------------------------------------------------------------------------ */

/* The value a load-dependent field answers: its gpu.N.under_load.* twin while the calling process is
 * under load (FAKENVML_UNDER_LOAD set and non-empty, read at every call: the fake CuPy sets it once a
 * GEMM has run), unless that twin was never set; otherwise the field itself. A rack whose cooling fails
 * only when its GPUs burn: idle callers see a healthy GPU, the burn's own samples see the fault. */
static const fake_val *load_field(const struct nvmlDevice_st *g, enum field f)
{
    const char *load = getenv("FAKENVML_UNDER_LOAD");
    enum field twin;
    switch (f) {
    case F_CLOCKS: twin = F_LOAD_CLOCKS; break;
    case F_SM_CLOCK: twin = F_LOAD_SM_CLOCK; break;
    case F_TEMP: twin = F_LOAD_TEMP; break;
    case F_POWER: twin = F_LOAD_POWER; break;
    default: return &g->f[f];
    }
    if (!load || !*load || g->f[twin].state == VAL_UNSET)
        return &g->f[f];
    return &g->f[twin];
}

static nvmlReturn_t clocks_reasons(const char *fn, nvmlDevice_t device, unsigned long long *out)
{
    struct nvmlDevice_st *g = NULL;
    const fake_val *v;
    SCN_READER(held);
    nvmlReturn_t r = dev_enter(fn, device, &g, &held);
    if (r != NVML_SUCCESS)
        return r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    v = load_field(g, F_CLOCKS);
    if (v->state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_reasons(v->s, out) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    return clocks_reasons(__func__, device, clocksEventReasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *clocksThrottleReasons)
{
    return clocks_reasons(__func__, device, clocksThrottleReasons);
}

/* Only the SM clock domain is modelled (what the burn-in samples); the others answer NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEV_ENTER(device, g);
    if (!clock || (unsigned int)type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_CLOCK_SM)
        return NVML_ERROR_NOT_SUPPORTED;
    return val_u32(load_field(g, F_SM_CLOCK), clock);
}

static nvmlReturn_t sensor_temp(struct nvmlDevice_st *g, unsigned int sensor, unsigned int *out)
{
    if (sensor >= NVML_TEMPERATURE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_NOT_SUPPORTED;
    return val_u32(load_field(g, F_TEMP), out);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    DEV_ENTER(device, g);
    if (!temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    return sensor_temp(g, (unsigned int)sensorType, temp);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    unsigned int t;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if ((r = sensor_temp(g, (unsigned int)temperature->sensorType, &t)) != NVML_SUCCESS)
        return r;
    if (t > INT_MAX)
        return NVML_ERROR_UNKNOWN;
    temperature->temperature = (int)t;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    enum field f;
    DEV_ENTER(device, g);
    if (!temp || (unsigned int)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: f = F_TEMP_SHUTDOWN; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: f = F_TEMP_SLOWDOWN; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: f = F_TEMP_MEM_MAX; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: f = F_TEMP_GPU_MAX; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    return val_u32(&g->f[f], temp);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEV_ENTER(device, g);
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    return val_u32(load_field(g, F_POWER), power);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return u32_field(__func__, device, F_POWER_LIMIT, limit);
}

/* ------------------------------------------------------------------------ */
/* Links                                                                     */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return u32_field(__func__, device, F_PCIE_GEN_CUR, currLinkGen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return u32_field(__func__, device, F_PCIE_GEN_MAX, maxLinkGen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return u32_field(__func__, device, F_PCIE_W_CUR, currLinkWidth);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return u32_field(__func__, device, F_PCIE_W_MAX, maxLinkWidth);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    unsigned long long down[FAKE_MAX_LIST];
    unsigned int links, ndown = 0, i;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = val_u32(&g->f[F_NVLINK_COUNT], &links)) != NVML_SUCCESS)
        return r;
    if (links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->f[F_NVLINK_DOWN].state == VAL_SET && parse_list(g->f[F_NVLINK_DOWN].s, down, FAKE_MAX_LIST, &ndown) != 0)
        return NVML_ERROR_UNKNOWN;
    *isActive = NVML_FEATURE_ENABLED;
    for (i = 0; i < ndown; i++)
        if (down[i] == link)
            *isActive = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Fabric (NVSwitch systems, Hopper and later)                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    unsigned char uuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int clique;
    unsigned int state;
    unsigned int health;
} fabric_values;

static nvmlReturn_t fabric_read(struct nvmlDevice_st *g, fabric_values *out)
{
    const fake_val *f = g->f;
    nvmlReturn_t r;
    memset(out, 0, sizeof *out);
    if (f[F_FAB_STATE].state != VAL_SET)
        return NVML_ERROR_NOT_SUPPORTED;
    if (parse_fabstate(f[F_FAB_STATE].s, &out->state) != 0)
        return NVML_ERROR_UNKNOWN;
    if (f[F_FAB_STATUS].state == VAL_SET && parse_retcode(f[F_FAB_STATUS].s, &out->status) != 0)
        return NVML_ERROR_UNKNOWN;
    if (f[F_FAB_CLIQUE].state == VAL_SET && (r = val_u32(&f[F_FAB_CLIQUE], &out->clique)) != NVML_SUCCESS)
        return r;
    if (f[F_FAB_HEALTH].state == VAL_SET && (r = val_u32(&f[F_FAB_HEALTH], &out->health)) != NVML_SUCCESS)
        return r;
    if (f[F_FAB_UUID].state == VAL_SET && parse_hex128(f[F_FAB_UUID].s, out->uuid) != 0)
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    fabric_values v;
    nvmlReturn_t r;
    DEV_ENTER(device, g);
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = fabric_read(g, &v)) != NVML_SUCCESS)
        return r;
    memset(gpuFabricInfo, 0, sizeof *gpuFabricInfo);
    memcpy(gpuFabricInfo->clusterUuid, v.uuid, sizeof gpuFabricInfo->clusterUuid);
    gpuFabricInfo->status = v.status;
    gpuFabricInfo->cliqueId = v.clique;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)v.state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    fabric_values v;
    nvmlReturn_t r;
    unsigned int version;
    DEV_ENTER(device, g);
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if ((r = fabric_read(g, &v)) != NVML_SUCCESS)
        return r;
    if (version == nvmlGpuFabricInfo_v2) {
        nvmlGpuFabricInfo_v2_t *out = (nvmlGpuFabricInfo_v2_t *)gpuFabricInfo;
        memset(out, 0, sizeof *out);
        out->version = version;
        memcpy(out->clusterUuid, v.uuid, sizeof out->clusterUuid);
        out->status = v.status;
        out->cliqueId = v.clique;
        out->state = (nvmlGpuFabricState_t)v.state;
        out->healthMask = v.health;
    } else {
        memset(gpuFabricInfo, 0, sizeof *gpuFabricInfo);
        gpuFabricInfo->version = version;
        memcpy(gpuFabricInfo->clusterUuid, v.uuid, sizeof gpuFabricInfo->clusterUuid);
        gpuFabricInfo->status = v.status;
        gpuFabricInfo->cliqueId = v.clique;
        gpuFabricInfo->state = (nvmlGpuFabricState_t)v.state;
        gpuFabricInfo->healthMask = v.health;
        gpuFabricInfo->healthSummary = 0; /* NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED */
    }
    return NVML_SUCCESS;
}
