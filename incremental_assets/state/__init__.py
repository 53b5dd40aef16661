"""The state wing: the bookkeeping tables, each with one owner module (its schema, reads and
writes), and the operations every state table must support (the rows before a start)."""
