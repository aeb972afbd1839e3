"""OS readers for the device's temperatures, CPU frequencies, memory and process figures."""
