"""The foundation: data types, vocabulary and catalogues (standard library only)."""
