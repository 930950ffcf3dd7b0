"""Prostore datamarts as delta-partitioned assets: one asset group, job and sensor per datamart."""
