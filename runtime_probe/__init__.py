"""The runtime probe: runs a flagged program under the real framework to confirm a finding."""
