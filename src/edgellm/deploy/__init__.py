"""Deploy the daemon to a phone under Termux: adb adapter, control channel, idempotent step plan."""
