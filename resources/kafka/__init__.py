"""A real Apache Kafka broker for tests and the demo (`broker`), and small admin helpers (`admin`)."""
