"""Graph rewrites of the Relax module before legalisation: each a function from a module to a new one, composed
in order by compiler/lowering.py."""
