"""The REST service: the FastAPI application (``app``, ``routes``), its schemas, the server's policy on what a
client may ask for (``policy``), and the scheduler that runs each campaign in a worker process (``worker``) on
this machine or the Ray cluster (``cluster``)."""
