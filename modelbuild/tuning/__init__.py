"""MetaSchedule's machinery as the tune stage drives it: a builder that compiles candidates in kept worker
processes, and how many runs a candidate's timing needs."""
