"""What keeps a namespace's data safe and honest: the server checked before use, data loss
and failover detected and recorded, replication waited for, the reconciler and the
quarantine.
"""
