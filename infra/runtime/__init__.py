"""What every stage runs on: settings, typed configs, Kafka clients, the topic catalog, DLQ, the consume loop, checkpoints, policy versions, the policy interface."""
