"""Fakes for testing one layer in isolation; each is named as a fake and says what it stands in for."""
