"""A calibrated virtual phone: thermal plant, firmware throttling, fake sysfs, simulated clock."""
