"""Sensors: the hardware edge. Each one sits behind the small `Sensor` protocol in base.py."""
