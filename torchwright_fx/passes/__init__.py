"""Small rewrites of the primitive graph, each a function Program -> Program."""
