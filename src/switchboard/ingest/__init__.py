"""Inbound webhooks (SPEC-0003): signature checks, delivery ids and event derivation."""
