"""Prostore emulator: faithful signal and backup traffic plus the true state per delta."""
