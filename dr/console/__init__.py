"""The Seaway console (issue 20), served by `dr serve`: what it keeps and computes, apart from
how it is served."""
