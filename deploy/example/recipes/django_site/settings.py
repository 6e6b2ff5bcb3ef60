"""Recipe: Django settings with a settings-driven duetime namespace.

    DUETIME_REDIS_URL=redis://127.0.0.1:6379/0 DJANGO_SETTINGS_MODULE=django_site.settings \
        python -m django duetime_run          # a replica (from deploy/example/recipes)

Producers (views.py) and replicas (the ``duetime_run`` command) read ``DUETIME``, so both
sides always use the same Redis and namespace.
"""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "recipe-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_site.urls"
INSTALLED_APPS = ["django_site.jobs"]
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

DUETIME = {
    "REDIS_URL": os.environ.get("DUETIME_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "NAMESPACE": os.environ.get("DUETIME_NAMESPACE", "django-site"),
    "TASKS": ["django_site.jobs.tasks"],  # modules whose @task functions replicas run
    "WORKERS": 4,
}
