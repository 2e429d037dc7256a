"""The fleet: the only library code that talks to Celery and kombu.

- :mod:`~pipeline.fleet.broker`: sending work and asking who is there;
- :mod:`~pipeline.fleet.job_log`: every index, rebuild and QMD job, in Celery's result backend;
- :mod:`~pipeline.fleet.placement`: which memories' stores this host holds;
- :mod:`~pipeline.fleet.shard_copy`: moving a shard's stores to another host;
- :mod:`~pipeline.fleet.kombu_repairs`: two repairs to kombu's Redis transport.

Import the module you need: this package imports nothing, so reading placement or the job
log's records never loads Celery.
"""
