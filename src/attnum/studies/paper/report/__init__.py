"""The paper family's findings, headline, figures and report section, computed from stored rows."""
