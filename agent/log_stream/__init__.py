"""The agent's log stream: entries of the error classes from the VM's Kafka, KRaft
controller and ZooKeeper log files to the `_kaas_logs` topic, and their rate to statsd.
`classify.py` and `follow.py` are pure; `shipper.py` reads the files and produces."""
