// pingpong: the floor of one small op between two processes on this
// machine, in plain C: a client sends a 4-byte length and that many bytes
// over one loopback TCP connection, the server reads them and answers one
// byte, and the client times each round trip. kvconnect's bench runs it
// beside the kvconnect variants (make bench builds it into bin/).
//
//   pingpong server             prints "port=N", serves one client, exits
//   pingpong client PORT BYTES SECONDS WARMUP_SECONDS
//                               prints {"ops":N,"seconds":S,"p50_us":X,"p99_us":Y,"mean_us":Z}
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int full(int fd, void *buf, size_t n, int rd) {
	char *p = buf;
	while (n > 0) {
		ssize_t k = rd ? read(fd, p, n) : write(fd, p, n);
		if (k <= 0) return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int server(void) {
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (ls < 0 || bind(ls, (void *)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (void *)&a, &al)) return perror("listen"), 1;
	printf("port=%d\n", ntohs(a.sin_port));
	fflush(stdout);
	int c = accept(ls, NULL, NULL);
	if (c < 0) return perror("accept"), 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char *buf = malloc(1 << 24);
	uint32_t n;
	char ack = 1;
	while (full(c, &n, 4, 1) == 0 && n <= (1 << 24) && full(c, buf, n, 1) == 0)
		if (full(c, &ack, 1, 0)) break;
	return 0;
}

static int client(int port, uint32_t bytes, double seconds, double warmup) {
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (s < 0 || connect(s, (void *)&a, sizeof a)) return perror("connect"), 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char *buf = calloc(1, bytes ? bytes : 1);
	size_t cap = 1 << 20, n = 0;
	double *lat = malloc(cap * sizeof *lat);
	struct iovec iov[2] = {{&bytes, 4}, {buf, bytes}};
	char ack;
	double start = now(), measure = start + warmup, end = measure + seconds;
	for (double t = start; t < end; t = now()) {
		if (writev(s, iov, 2) != (ssize_t)(4 + bytes) || full(s, &ack, 1, 1)) return perror("round trip"), 1;
		double d = now() - t;
		if (t >= measure && n < cap) lat[n++] = d;
	}
	if (n == 0) return fprintf(stderr, "no round trip measured\n"), 1;
	double sum = 0;
	for (size_t i = 0; i < n; i++) sum += lat[i];
	qsort(lat, n, sizeof *lat, cmp);
	printf("{\"ops\":%zu,\"seconds\":%.6f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f}\n", n, seconds,
	       lat[n / 2] * 1e6, lat[n * 99 / 100] * 1e6, sum / n * 1e6);
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 2 && !strcmp(argv[1], "server")) return server();
	if (argc == 6 && !strcmp(argv[1], "client")) return client(atoi(argv[2]), (uint32_t)atoi(argv[3]), atof(argv[4]), atof(argv[5]));
	fprintf(stderr, "usage: pingpong server | pingpong client PORT BYTES SECONDS WARMUP_SECONDS\n");
	return 2;
}
