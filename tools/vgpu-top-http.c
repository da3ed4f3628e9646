/* vgpu-top-http.c - vgpu-top --listen ADDR:PORT: /metrics over HTTP.
 *
 * The HTTP is libmicrohttpd's (an internal thread pool); this file only
 * parses the address, makes the listening socket (so that a bind error
 * names the address, and ":PORT" can fall back from IPv6 to IPv4), routes
 * the requests and renders each scrape from a fresh read of the ledgers
 * with the code --prometheus prints with (top_print_prometheus).
 *
 * Renders are serialised by one mutex: top_snap_read keeps a static memo
 * of the pids it confirmed and calls getpwuid() and strerror(), none of
 * which may run in two threads at once. A render takes milliseconds; the
 * replies are sent outside the lock.
 */
#include "vgpu-top.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_THREADS		4
/* Connections: 512 at once, 64 from any one address, each closed after
 * 10 s without a byte. A host that opened 300 and sent a header line
 * every 10 s held all 256 of the old limit and no scrape was answered
 * (a hostile review); it now holds 64, the others are served. Many hosts
 * doing so still can: the listener belongs on the cluster's network
 * (docs/kubernetes.md). */
#define HTTP_CONN_LIMIT		512
#define HTTP_PER_ADDR_LIMIT	64
#define HTTP_IDLE_TIMEOUT_S	10
#define HTTP_BACKLOG		128

#define CT_METRICS	"text/plain; version=0.0.4; charset=utf-8"
#define CT_TEXT		"text/plain; charset=utf-8"

/* ---- the address ------------------------------------------------------------ */

/* msg: "--listen 'SPEC': " and why. Returns -1. */
__attribute__((format(printf, 4, 5)))
static int listen_fail(char *msg, size_t len, const char *spec,
		       const char *fmt, ...)
{
	int n = snprintf(msg, len, "--listen '%s': ", spec);
	va_list ap;

	if (n < 0 || (size_t)n >= len)
		return -1;
	va_start(ap, fmt);
	vsnprintf(msg + n, len - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int parse_port(const char *p, uint16_t *port)
{
	unsigned long v = 0;

	if (!*p || strlen(p) > 5)
		return -1;
	for (const char *c = p; *c; c++) {
		if (*c < '0' || *c > '9')
			return -1;
		v = v * 10 + (unsigned long)(*c - '0');
	}
	if (v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

/* Splits spec into the host (into host, without brackets) and the port's
 * text; *v6 when the host was bracketed. */
static int split_host(const char *spec, char *host, size_t hlen,
		      const char **port, bool *v6, char *msg, size_t len)
{
	const char *start = spec, *colon, *end;

	*v6 = spec[0] == '[';
	if (*v6) {
		end = strchr(spec, ']');
		if (!end)
			return listen_fail(msg, len, spec, "no ']' closes the "
					   "IPv6 address");
		if (end[1] != ':')
			return listen_fail(msg, len, spec, "expected ':PORT' "
					   "after ']'");
		start = spec + 1;
		colon = end + 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon)
			return listen_fail(msg, len, spec, "expected ADDR:PORT, "
					   "e.g. 127.0.0.1:9400, [::1]:9400 "
					   "or :9400");
		end = colon;
		if (memchr(spec, ':', (size_t)(colon - spec)))
			return listen_fail(msg, len, spec, "an IPv6 address "
					   "goes in brackets, e.g. "
					   "[::1]:9400");
	}
	if ((size_t)(end - start) >= hlen)
		return listen_fail(msg, len, spec, "the address is too "
				   "long");
	memcpy(host, start, (size_t)(end - start));
	host[end - start] = '\0';
	*port = colon + 1;
	return 0;
}

int top_listen_parse(const char *spec, struct top_listen *l, char *msg,
		     size_t len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)&l->addr;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&l->addr;
	char host[INET6_ADDRSTRLEN + 8];
	const char *port = "";
	bool v6;

	memset(l, 0, sizeof(*l));
	l->spec = spec;
	if (split_host(spec, host, sizeof(host), &port, &v6, msg, len))
		return -1;
	if (parse_port(port, &l->port))
		return listen_fail(msg, len, spec, "port '%s': expected a "
				   "number from 0 to 65535 (0: any free "
				   "port)", port);
	l->any = !v6 && !*host;
	if (l->any)
		return 0;
	if (v6 && inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(l->port);
		l->addr_len = sizeof(*in6);
		return 0;
	}
	if (!v6 && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(l->port);
		l->addr_len = sizeof(*in4);
		return 0;
	}
	if (v6)
		return listen_fail(msg, len, spec, "'%s' is not an IPv6 "
				   "address", host);
	return listen_fail(msg, len, spec, "'%s' is not an IPv4 address "
			   "(names are not looked up; IPv6 goes in brackets)",
			   host);
}

/* ---- the socket ------------------------------------------------------------- */

static int bind_listen(const struct sockaddr *sa, socklen_t len, bool dual)
{
	int fd = socket(sa->sa_family,
			SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1, zero = 0, saved;

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (sa->sa_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual ? &zero : &one,
			sizeof(int))) ||
	    bind(fd, sa, len) || listen(fd, HTTP_BACKLOG))
		goto out_close;
	return fd;
out_close:
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

/* The listening socket: the address given, or for ":PORT" every IPv6 and
 * IPv4 address (one dual-stack socket), or every IPv4 address where the
 * host has no IPv6. -1 with errno. */
static int open_listener(const struct top_listen *l)
{
	struct sockaddr_in6 any6 = { .sin6_family = AF_INET6,
				     .sin6_addr = IN6ADDR_ANY_INIT,
				     .sin6_port = htons(l->port) };
	struct sockaddr_in any4 = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_ANY),
				    .sin_port = htons(l->port) };
	int fd;

	if (!l->any)
		return bind_listen((const struct sockaddr *)&l->addr,
				   l->addr_len, false);
	fd = bind_listen((const struct sockaddr *)&any6, sizeof(any6), true);
	if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL))
		fd = bind_listen((const struct sockaddr *)&any4, sizeof(any4),
				 false);
	return fd;
}

/* "127.0.0.1:9400" or "[::]:9400": where fd listens. */
static void bound_name(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const void *)&ss;

			inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		} else {
			const struct sockaddr_in *a = (const void *)&ss;

			inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		}
	}
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		 host, port);
}

/* ---- the requests ----------------------------------------------------------- */

static pthread_mutex_t render_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fresh read of dir as the exposition, into *buf (malloc'd, *len
 * bytes). 0; -1 when dir cannot be listed (*buf then says why) or memory
 * ran out (*buf NULL). */
static int render(const char *dir, char **buf, size_t *len)
{
	char *why = NULL;
	size_t wlen = 0;
	struct top_snap s;
	FILE *f, *problems;
	int rc = -1;

	*buf = NULL;
	*len = 0;
	pthread_mutex_lock(&render_lock);
	problems = open_memstream(&why, &wlen);
	if (!problems)
		goto out_unlock;
	f = open_memstream(buf, len);
	if (!f)
		goto out_problems;
	if (top_snap_read(&s, dir, problems) == 0) {
		top_print_prometheus(f, &s);
		top_snap_free(&s);
		rc = 0;
	} else if (fflush(problems) == 0 && why && *why) {
		fputs(why, f);
	} else {
		fputs("vgpu-top: cannot list the ledger directory\n", f);
	}
	if (fclose(f) != 0) {
		free(*buf);
		*buf = NULL;
		rc = -1;
	}
out_problems:
	fclose(problems);
	free(why);
out_unlock:
	pthread_mutex_unlock(&render_lock);
	return rc;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
			     const char *type, char *body, size_t len,
			     enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body,
								   mode);
	enum MHD_Result ok;

	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status,
				  const char *text)
{
	return reply(c, status, CT_TEXT, (char *)text, strlen(text),
		     MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result serve_metrics(struct MHD_Connection *c,
				     const char *dir)
{
	char *body;
	size_t len;

	if (render(dir, &body, &len) == 0)
		return reply(c, MHD_HTTP_OK, CT_METRICS, body, len,
			     MHD_RESPMEM_MUST_FREE);
	if (!body)
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "vgpu-top: out of memory\n");
	return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_TEXT, body, len,
		     MHD_RESPMEM_MUST_FREE);
}

/* GET or HEAD of /metrics (the query string is ignored) and /; anything
 * else 404, another method on those two 405. GET and HEAD are answered on
 * the second call, once the request is complete, so the connection is
 * kept alive; other methods on the first, before a body is read (MHD then
 * closes the connection). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	static char started;
	const char *dir = cls;
	bool metrics = strcmp(url, "/metrics") == 0;
	bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
		   strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;

	(void)version;
	(void)upload;
	(void)upload_len;
	if (get && !*state) {
		*state = &started;
		return MHD_YES;
	}
	if (!metrics && strcmp(url, "/") != 0)
		return reply_text(c, MHD_HTTP_NOT_FOUND,
				  "not found: vgpu-top serves /metrics\n");
	if (!get)
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "method not allowed: GET or HEAD\n");
	if (!metrics)
		return reply_text(c, MHD_HTTP_OK, "vgpu-top: libvgpu's "
				  "ledgers in the Prometheus text format at "
				  "/metrics\n");
	return serve_metrics(c, dir);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	fputs("vgpu-top: http: ", stderr);
	vfprintf(stderr, fmt, ap);
}

/* ---- the server ------------------------------------------------------------- */

static int stop_pipe[2] = { -1, -1 };

/* SIGINT, SIGTERM: one byte down the pipe the main thread reads. Whatever
 * thread the signal lands in (a sanitizer's runtime has its own). */
static void on_stop(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(stop_pipe[1], &c, 1) < 0)
		(void)0;	/* full: a stop is pending already */
	errno = saved;
}

/* The stop handler, and the signals blocked in the server's threads:
 * called before they start (they inherit the mask); the main thread
 * unblocks them once they have. -1 if the pipe cannot be made. */
static int catch_stop_signals(sigset_t *set)
{
	struct sigaction sa = { .sa_handler = on_stop };

	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	return 0;
}

/* Until SIGINT or SIGTERM. */
static void wait_stop(const sigset_t *set)
{
	struct pollfd p = { .fd = stop_pipe[0], .events = POLLIN };

	pthread_sigmask(SIG_UNBLOCK, set, NULL);
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
}

/* The files skipped at start, named once on stderr; scrapes count them
 * (vgpu_top_skipped_files) without a message. */
static void say_problems(const char *dir)
{
	struct top_snap s;

	pthread_mutex_lock(&render_lock);
	if (top_snap_read(&s, dir, stderr) == 0)
		top_snap_free(&s);
	pthread_mutex_unlock(&render_lock);
}

int top_serve(const char *dir, const struct top_listen *l)
{
	struct MHD_Daemon *d;
	char name[INET6_ADDRSTRLEN + 16];
	sigset_t set;
	int fd;

	if (catch_stop_signals(&set) != 0) {
		fprintf(stderr, "vgpu-top: --listen: %s\n", strerror(errno));
		return 1;
	}
	fd = open_listener(l);
	if (fd < 0) {
		fprintf(stderr, "vgpu-top: --listen '%s': cannot listen: %s\n",
			l->spec, strerror(errno));
		return 1;
	}
	bound_name(fd, name, sizeof(name));
	say_problems(dir);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			     MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request,
			     (void *)dir,
			     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
			     MHD_OPTION_LISTEN_SOCKET, fd,
			     MHD_OPTION_THREAD_POOL_SIZE,
			     (unsigned)HTTP_THREADS,
			     MHD_OPTION_CONNECTION_LIMIT,
			     (unsigned)HTTP_CONN_LIMIT,
			     MHD_OPTION_PER_IP_CONNECTION_LIMIT,
			     (unsigned)HTTP_PER_ADDR_LIMIT,
			     MHD_OPTION_CONNECTION_TIMEOUT,
			     (unsigned)HTTP_IDLE_TIMEOUT_S,
			     MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "vgpu-top: --listen: cannot start the HTTP "
			"server on %s\n", name);
		close(fd);
		return 1;
	}
	fprintf(stderr, "vgpu-top: serving http://%s/metrics\n", name);
	wait_stop(&set);
	MHD_stop_daemon(d);
	return 0;
}
