"""attnum's bundled workloads: small models (a byte-level LM, a digits diffusion transformer) and the
data they train on, all shipped in packages or generated here (no downloads). Shared by the study
families that train or serve a model (training, consistency, lowbit); a family never imports another.
"""
