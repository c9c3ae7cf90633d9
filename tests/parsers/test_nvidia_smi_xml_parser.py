"""nvidia-smi -q -x: the values SOURCES.md lists for each real capture, then the newest schema."""

from __future__ import annotations

import pytest

from gpucheck.parsers import ParseError, parse
from support import REAL

A100 = "nvidia-smi-xml/a100-sxm4-80gb-mig-v12.xml"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_a100_mig_v12_one_gpu_element_of_four_attached() -> None:
    r = parse("nvidia-smi-xml", real(A100))
    assert (r["driver_version"], r["cuda_version"], r["attached_gpus"]) == ("535.54.03", "12.2", 4)
    (gpu,) = r["gpus"]  # the capture was trimmed to one <gpu>
    assert (gpu["name"], gpu["uuid"], gpu["pci_bus_id"]) == (
        "NVIDIA A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298", "00000000:01:00.0")
    assert (gpu["memory_total_MiB"], gpu["compute_mode"], gpu["mig_mode"], gpu["persistence_mode"]) == (
        81920, "Default", "Enabled", "Disabled")
    assert gpu["ecc"] == {"mode": "Enabled", "volatile_corrected": 0, "volatile_uncorrected": 0,
                          "aggregate_corrected": 0, "aggregate_uncorrected": 0}
    assert gpu["clocks_event_reasons"] == []  # new element name, all "Not Active"
    assert gpu["remapped_rows"] is None and gpu["retired_pages_pending"] is None  # N/A
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert (gpu["temperature_C"], gpu["power_draw_W"], gpu["power_limit_W"]) == (27, 67.03, 500.0)
    assert gpu["reset_required"] is False
    assert len(gpu["mig_devices"]) == 4 and len(r["mig_devices"]) == 4
    assert all((m["sm_count"], m["memory_total_MiB"]) == (14, 19968) for m in r["mig_devices"])
    assert [m["gpu_instance_id"] for m in r["mig_devices"]] == [3, 4, 5, 6]
    assert r["mig_devices"][0]["gpu"] == "00000000:01:00.0"


def test_t4_old_names_degraded_pcie_width_and_bare_none_mig_devices() -> None:
    r = parse("nvidia-smi-xml", real("nvidia-smi-xml/tesla-t4-v11-515.xml"))
    assert (r["driver_version"], r["cuda_version"], r["attached_gpus"]) == ("515.105.01", "11.7", 1)
    (gpu,) = r["gpus"]
    assert (gpu["name"], gpu["pci_bus_id"], gpu["mig_mode"]) == ("Tesla T4", "00000000:00:1E.0", None)
    assert gpu["pcie"] == {"gen_current": 3, "gen_max": 3, "width_current": 8, "width_max": 16}
    assert (gpu["power_draw_W"], gpu["power_limit_W"]) == (26.78, 70.0)  # power_readings/power_limit
    assert gpu["clocks_event_reasons"] == []  # from clocks_throttle_reasons
    assert gpu["mig_devices"] == [] and r["mig_devices"] == []
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0} and gpu["retired_pages_pending"] is False
    assert gpu["memory_total_MiB"] == 15360


def test_p100_tabs_old_ecc_schema_and_idle_throttle_reason() -> None:
    r = parse("nvidia-smi-xml", real("nvidia-smi-xml/tesla-p100-pcie-v11-510-tabs.xml"))
    (gpu,) = r["gpus"]
    assert (r["driver_version"], gpu["name"], gpu["pci_bus_id"]) == (
        "510.47.03", "Tesla P100-PCIE-16GB", "00000000:00:04.0")
    assert gpu["ecc"] == {"mode": "Enabled", "volatile_corrected": 0, "volatile_uncorrected": 0,
                          "aggregate_corrected": 3, "aggregate_uncorrected": 0}
    assert gpu["clocks_event_reasons"] == ["gpu_idle"]
    assert gpu["memory_total_MiB"] == 16384


H100_550 = """\
Failed to query fan speed for one device
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version>
  <cuda_version>12.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <persistence_mode>Enabled</persistence_mode>
    <mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
    <mig_devices>None</mig_devices>
    <uuid>GPU-11111111-2222-3333-4444-555555555555</uuid>
    <gpu_reset_status><reset_required>Yes</reset_required></gpu_reset_status>
    <pci>
      <pci_bus_id>00000000:18:00.0</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>5</max_link_gen><current_link_gen>5</current_link_gen></pcie_gen>
        <link_widths><max_link_width>16x</max_link_width><current_link_width>16x</current_link_width></link_widths>
      </pci_gpu_link_info>
    </pci>
    <clocks_event_reasons>
      <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
      <clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>
      <clocks_event_reason_sw_thermal_slowdown>Active</clocks_event_reason_sw_thermal_slowdown>
    </clocks_event_reasons>
    <fb_memory_usage><total>81559 MiB</total></fb_memory_usage>
    <compute_mode>Exclusive_Process</compute_mode>
    <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <sram_correctable>0</sram_correctable>
        <sram_uncorrectable_parity>0</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>1</sram_uncorrectable_secded>
        <dram_correctable>12</dram_correctable>
        <dram_uncorrectable>2</dram_uncorrectable>
      </volatile>
      <aggregate>
        <sram_correctable>0</sram_correctable>
        <sram_uncorrectable_parity>0</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>1</sram_uncorrectable_secded>
        <dram_correctable>40</dram_correctable>
        <dram_uncorrectable>5</dram_uncorrectable>
        <sram_threshold_exceeded>No</sram_threshold_exceeded>
      </aggregate>
    </ecc_errors>
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>2</remapped_row_unc>
      <remapped_row_pending>Yes</remapped_row_pending>
      <remapped_row_failure>No</remapped_row_failure>
    </remapped_rows>
    <temperature><gpu_temp>87 C</gpu_temp></temperature>
    <gpu_power_readings>
      <average_power_draw>690.00 W</average_power_draw>
      <instant_power_draw>698.12 W</instant_power_draw>
      <current_power_limit>700.00 W</current_power_limit>
    </gpu_power_readings>
    <fabric><state>Completed</state><status>Success</status></fabric>
  </gpu>
</nvidia_smi_log>
"""


def test_newest_schema_split_sram_counters_pending_remap_and_active_reasons() -> None:
    r = parse("nvidia-smi-xml", H100_550.replace("\n", "\r\n"))
    (gpu,) = r["gpus"]
    assert gpu["ecc"] == {"mode": "Enabled", "volatile_corrected": 12, "volatile_uncorrected": 3,
                          "aggregate_corrected": 40, "aggregate_uncorrected": 6}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 2, "pending": True, "failure": False}
    assert gpu["clocks_event_reasons"] == ["hw_slowdown", "sw_thermal_slowdown"]
    assert (gpu["power_draw_W"], gpu["power_limit_W"], gpu["temperature_C"]) == (698.12, 700.0, 87)
    assert (gpu["reset_required"], gpu["compute_mode"], gpu["mig_mode"]) == (True, "Exclusive_Process", "Disabled")
    assert gpu["fabric"] == {"state": "Completed", "status": "Success"}
    assert gpu["mig_devices"] == []


def test_truncated_xml_is_a_parse_error() -> None:
    text = real(A100)
    with pytest.raises(ParseError, match="malformed or truncated XML"):
        parse("nvidia-smi-xml", text[: len(text) // 2])


def test_other_xml_document_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="nvidia_smi_log"):
        parse("nvidia-smi-xml", '<?xml version="1.0"?>\n<rdma_stats><port>1</port></rdma_stats>\n')
