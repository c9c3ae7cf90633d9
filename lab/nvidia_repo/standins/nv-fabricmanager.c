/*
 * Stand-in for NVIDIA's nv-fabricmanager (package nvidia-fabricmanager-<branch>), built by the gpucheck lab
 * (lab/nvidia_repo/README.md cites what each behaviour is modelled on). It configures no NVSwitch.
 *
 * As the real one: it compares its own version (STANDIN_FM_VERSION) with the loaded driver's and refuses to
 * start when they differ, with NVIDIA's message and exit 1; when they are equal it daemonizes as the unit's
 * Type=forking expects: the parent exits 0 once the daemon has written its PID file, and the daemon runs until
 * SIGTERM (or SIGINT), then removes the PID file and exits 0. `-v` prints the version as the real one does;
 * `-c FILE` is read for LOG_FILE_NAME, LOG_APPEND_TO_LOG, LOG_LEVEL and DAEMONIZE.
 *
 * The loaded driver's version is NVML's (nvmlSystemGetDriverVersion of libnvidia-ml.so.1: in the lab, the
 * fake NVML answering from its scenario); the real one asks the driver. GPUCHECK_FM_PID_FILE, a stand-in
 * setting, moves the PID file (tests run unprivileged).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef STANDIN_FM_VERSION
#error "build with -DSTANDIN_FM_VERSION='\"<driver version>\"'"
#endif

#define DEFAULT_CONFIG "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
#define DEFAULT_PID_FILE "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"
#define PID_FILE_ENV "GPUCHECK_FM_PID_FILE"
#define VALUE_MAX 512
#define NVML_VERSION_BUFFER 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */

enum { LEVEL_ERROR = 2, LEVEL_INFO = 4 };

struct settings {
    char log_file[VALUE_MAX];
    int append;
    int level;
    int daemonize;
};

static FILE *g_log;
static int g_level = LEVEL_INFO;

/* A log line as FM writes them to LOG_FILE_NAME: "[May 12 2025 15:08:04] [INFO] [tid 15992] message". */
static void log_line(int level, const char *fmt, ...)
{
    if (g_log == NULL || level > g_level)
        return;
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%b %d %Y %H:%M:%S", localtime(&now));
    fprintf(g_log, "[%s] [%s] [tid %ld] ", when, level == LEVEL_ERROR ? "ERROR" : "INFO", (long)syscall(SYS_gettid));
    va_list args;
    va_start(args, fmt);
    vfprintf(g_log, fmt, args);
    va_end(args);
    fputc('\n', g_log);
    fflush(g_log);
}

/* An error on stderr (the journal shows it as "nv-fabricmanager[PID]: ...") and in the log file. */
static void fail(const char *fmt, ...)
{
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    fprintf(stderr, "%s\n", message);
    if (g_log != stderr)
        log_line(LEVEL_ERROR, "%s", message);
}

static char *trim(char *text)
{
    while (*text == ' ' || *text == '\t')
        text++;
    size_t n = strlen(text);
    while (n > 0 && strchr(" \t\r\n", text[n - 1]) != NULL)
        text[--n] = '\0';
    return text;
}

/* KEY=VALUE lines, '#' comments; the keys this stand-in acts on, the rest ignored. */
static int read_config(const char *path, struct settings *out)
{
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        fprintf(stderr, "nv-fabricmanager stand-in: cannot read config file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[VALUE_MAX * 2];
    while (fgets(line, sizeof line, file) != NULL) {
        char *text = trim(line);
        char *equals = strchr(text, '=');
        if (*text == '#' || equals == NULL)
            continue;
        *equals = '\0';
        const char *key = trim(text), *value = trim(equals + 1);
        if (strcmp(key, "LOG_FILE_NAME") == 0)
            snprintf(out->log_file, sizeof out->log_file, "%s", value);
        else if (strcmp(key, "LOG_APPEND_TO_LOG") == 0)
            out->append = atoi(value);
        else if (strcmp(key, "LOG_LEVEL") == 0)
            out->level = atoi(value);
        else if (strcmp(key, "DAEMONIZE") == 0)
            out->daemonize = atoi(value);
    }
    fclose(file);
    return 0;
}

/* The loaded driver's version, as NVML reports it; -1 (message printed) when NVML cannot say. */
static int driver_version(char *version, unsigned int length)
{
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (nvml == NULL) {
        fail("nv-fabricmanager stand-in: cannot load NVML to read the driver version: %s", dlerror());
        return -1;
    }
    int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
    int (*get)(char *, unsigned int) = (int (*)(char *, unsigned int))dlsym(nvml, "nvmlSystemGetDriverVersion");
    int (*shutdown)(void) = (int (*)(void))dlsym(nvml, "nvmlShutdown");
    if (init == NULL || get == NULL || shutdown == NULL) {
        fail("nv-fabricmanager stand-in: libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlSystemGetDriverVersion");
        return -1;
    }
    int status = init();
    if (status != 0) {
        fail("nv-fabricmanager stand-in: nvmlInit_v2 failed (NVML return %d): no loaded driver to compare with",
             status);
        return -1;
    }
    status = get(version, length);
    shutdown();
    if (status != 0) {
        fail("nv-fabricmanager stand-in: nvmlSystemGetDriverVersion failed (NVML return %d)", status);
        return -1;
    }
    return 0;
}

static int write_pid_file(const char *path)
{
    char directory[VALUE_MAX];
    snprintf(directory, sizeof directory, "%s", path);
    mkdir(dirname(directory), 0755); /* /var/run/nvidia-fabricmanager: tmpfs, empty after each boot */
    FILE *file = fopen(path, "w");
    if (file == NULL || fprintf(file, "%ld\n", (long)getpid()) < 0 || fclose(file) != 0) {
        fail("nv-fabricmanager stand-in: cannot write PID file %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Fork; the parent exits 0 when the daemon says it is ready (PID file written), 1 when it could not be. */
static int daemonize(const char *pid_file)
{
    int ready[2];
    if (pipe(ready) != 0) {
        fail("nv-fabricmanager stand-in: pipe: %s", strerror(errno));
        return -1;
    }
    pid_t child = fork();
    if (child < 0) {
        fail("nv-fabricmanager stand-in: fork: %s", strerror(errno));
        return -1;
    }
    if (child > 0) {
        char byte = 0;
        close(ready[1]);
        _exit(read(ready[0], &byte, 1) == 1 && byte == 'R' ? 0 : 1);
    }
    close(ready[0]);
    setsid();
    umask(022);
    if (write_pid_file(pid_file) != 0)
        _exit(1);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) { /* let go of the caller's terminal or pipes, as a daemon does */
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        if (null > STDERR_FILENO)
            close(null);
    }
    if (write(ready[1], "R", 1) != 1)
        _exit(1);
    close(ready[1]);
    return 0;
}

static void usage(FILE *to, const char *program)
{
    fprintf(to, "usage: %s [-c|--config FILE] [-v|--version] [-h|--help]"
                " (gpucheck lab stand-in of NVIDIA Fabric Manager %s)\n", program, STANDIN_FM_VERSION);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"config", required_argument, NULL, 'c'}, {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'}, {"restart", no_argument, NULL, 'r'}, {NULL, 0, NULL, 0}};
    const char *config = DEFAULT_CONFIG;
    int option;
    while ((option = getopt_long(argc, argv, "c:vhr", options, NULL)) != -1) {
        switch (option) {
        case 'c': config = optarg; break;
        case 'v': printf("Fabric Manager version is : %s\n", STANDIN_FM_VERSION); return 0;
        case 'h': usage(stdout, argv[0]); return 0;
        case 'r': break; /* restart mode matters only to shared-NVSwitch multitenancy, not modelled */
        default: usage(stderr, argv[0]); return 1;
        }
    }
    struct settings settings = {.log_file = "", .append = 1, .level = LEVEL_INFO, .daemonize = 1};
    if (read_config(config, &settings) != 0)
        return 1;
    g_level = settings.level;
    /* As NVIDIA's fabricmanager.cfg says: logs go to stderr when the file cannot be opened or is empty. */
    g_log = settings.log_file[0] ? fopen(settings.log_file, settings.append ? "a" : "w") : NULL;
    if (g_log == NULL)
        g_log = stderr;

    char loaded[NVML_VERSION_BUFFER] = "";
    if (driver_version(loaded, sizeof loaded) != 0)
        return 1;
    if (strcmp(loaded, STANDIN_FM_VERSION) != 0) {
        fail("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
             "Please update with matching NVIDIA driver package.", STANDIN_FM_VERSION, loaded);
        return 1;
    }

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL); /* taken by sigwait below, never by a handler */
    const char *pid_file = getenv(PID_FILE_ENV) ? getenv(PID_FILE_ENV) : DEFAULT_PID_FILE;
    if (settings.daemonize ? daemonize(pid_file) != 0 : write_pid_file(pid_file) != 0)
        return 1;
    if (g_log == stderr && settings.daemonize)
        g_log = NULL; /* stderr is /dev/null now */
    log_line(LEVEL_INFO, "gpucheck lab stand-in: driver version %s matches; no NVSwitch configured", loaded);
    int signal_number = 0;
    sigwait(&stop, &signal_number);
    log_line(LEVEL_INFO, "gpucheck lab stand-in: stopping on signal %d", signal_number);
    unlink(pid_file);
    return 0;
}
