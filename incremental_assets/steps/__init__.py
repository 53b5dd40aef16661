"""The steps: each one transaction that claims its partitions, computes, checks, writes its
tables in a declared order and closes (`resources.manifest_io_manager.StepTransaction`)."""
