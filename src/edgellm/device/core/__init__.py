"""The daemon's core: model lifecycle (models), generation scheduling (scheduler), the facade (daemon)."""
