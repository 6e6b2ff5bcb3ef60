"""The readouts of a namespace: jobs one by one and a page at a time, stats and events,
the fleet of replicas, the console's history, the namespaces a Redis holds. None writes.
"""
