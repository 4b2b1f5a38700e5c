"""``lv doctor``: will LakeVilla's guarantees hold on this store? Store checks and the write guard."""

from lv_core.doctor.checks import CONDITIONAL, CheckResult, DoctorReport, Status, doctor, run_checks

__all__ = ["CONDITIONAL", "CheckResult", "DoctorReport", "Status", "doctor", "run_checks"]
