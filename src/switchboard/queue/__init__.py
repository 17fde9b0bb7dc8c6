"""Background work every instance runs: the lease reaper and the retry scheduler."""
