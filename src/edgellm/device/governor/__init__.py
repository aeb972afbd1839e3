"""The thermal governor: a pure controller, its ladder of operating points, and the actuators."""
