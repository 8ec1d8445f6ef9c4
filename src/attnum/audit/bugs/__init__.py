"""The corpus of upstream attention-kernel bugs (``corpus.toml``), and how attnum's auditor is measured on it:
each case's built-in target audited at its broken and fixed releases with the probes that name its symptom
(:mod:`.point`), fetched and checked first (:mod:`.run`), summed up as a recall table (:mod:`.table`)."""
