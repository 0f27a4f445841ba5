"""What specwatch writes for others to read: check's JSON and summary (`report`), the Prometheus
exporter and the names it serves (`export`, `export_schema`), and the fleet view that reads those
names back from Prometheus or from the agents directly (`fleet`, `fleet_direct`)."""
