"""The Django recipe's app: tasks (tasks.py), views that enqueue (views.py) and the
``duetime_run`` management command (a replica for the site's namespace)."""
