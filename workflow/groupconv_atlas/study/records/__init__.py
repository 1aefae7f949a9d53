"""Records and provenance: the committed records a replay reads (committed), checked against their
manifests (record_check), a live run's raw layer written into one (record_writing), one record
per results folder (record_mixing), each job's provenance and the index over it (provenance,
provenance_index), and what every job script shares (jobs)."""
