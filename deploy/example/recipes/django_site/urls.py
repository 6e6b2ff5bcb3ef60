from django.urls import path

from django_site.jobs import views

urlpatterns = [
    path("welcome/<int:user_id>", views.welcome),
    path("digest/<int:user_id>", views.digest),
]
