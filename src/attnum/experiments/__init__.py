"""The sweep machinery: specs into points (``spec``), one point in a worker (``point_runner``), and the row
API the findings and figures read (``results``). It asks :mod:`attnum.studies.registry` about kinds."""
