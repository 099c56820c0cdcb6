"""fx graph -> primitive graph."""
