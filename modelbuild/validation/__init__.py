"""Validation as pure logic: golden inputs and calibration samples, accuracy and timing statistics, gates."""
