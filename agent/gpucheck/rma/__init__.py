"""`gpucheck rma`: one archive with what an RMA form and a vendor's engineer ask for about a GPU or a node
(docs/rma.md)."""
