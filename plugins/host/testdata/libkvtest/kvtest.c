/* A tiny shared library the needlib test program links against. */
int kvtest_answer(void) { return 42; }
