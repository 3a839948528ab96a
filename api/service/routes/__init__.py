"""The REST API's routers, one per resource."""
