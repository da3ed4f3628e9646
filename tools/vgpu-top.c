/* vgpu-top - a live view of libvgpu's ledgers: per GPU its memory, the sum
 * of the slices and the utilisation; per tenant and process the memory
 * used against the limit, spilled memory, the compute share targeted and
 * achieved, launches per second, admission waits and liveness.
 *
 *   vgpu-top [--dir DIR] [--interval S] [--sort KEY] [--filter TEXT]
 *            [--once | --json | --prometheus | --listen ADDR:PORT]
 *
 * Read-only: every ledger is mapped PROT_READ and never written. A file
 * that is not a usable ledger gets one line on stderr and is skipped.
 * docs/vgpu-top.md has the keys, the JSON schema and the metrics.
 */
#include "vgpu-top.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

enum top_mode { MODE_LIVE, MODE_ONCE, MODE_JSON, MODE_PROMETHEUS,
		MODE_LISTEN };

struct top_opts {
	enum top_mode mode;
	const char *dir;
	double interval;
	bool interval_set;
	struct top_view view;
	char filter[128];
	struct top_listen listen;	/* MODE_LISTEN */
};

static void usage(FILE *f)
{
	fputs("usage: vgpu-top [--dir DIR] [--interval S] [--sort m|c|p|t] "
	      "[--filter TEXT]\n"
	      "                [--once | --json | --prometheus | "
	      "--listen ADDR:PORT]\n"
	      "  --dir DIR       ledger directory, also --ledger-dir DIR "
	      "(default:\n"
	      "                  $VGPU_LEDGER_DIR, else /dev/shm/vgpu)\n"
	      "  --interval S    refresh interval, and the sampling interval of "
	      "--once/--json\n"
	      "                  (default 1; 0 with --once/--json: one read, "
	      "no rates)\n"
	      "  --sort KEY      m memory, c compute, p pid, t tenant "
	      "(default m)\n"
	      "  --filter TEXT   only tenants and processes whose name or pid "
	      "contains TEXT\n"
	      "  --once          print one frame and exit\n"
	      "  --json          print one JSON document (docs/vgpu-top.md)\n"
	      "  --prometheus    print the Prometheus text format and exit\n"
	      "  --listen ADDR:PORT\n"
	      "                  serve that format over HTTP at /metrics "
	      "until SIGINT/SIGTERM\n"
	      "                  (127.0.0.1:9400, [::1]:9400, :9400 every "
	      "address; port 0: any free)\n"
	      "keys (live view): q quit, m/c/p/t sort, / filter (Enter ends, "
	      "Esc clears), space refresh\n", f);
}

static int sort_of(int c, enum top_sort *out)
{
	switch (c) {
	case 'm': *out = TOP_SORT_MEMORY; return 0;
	case 'c': *out = TOP_SORT_COMPUTE; return 0;
	case 'p': *out = TOP_SORT_PID; return 0;
	case 't': *out = TOP_SORT_TENANT; return 0;
	}
	return -1;
}

static int set_mode(struct top_opts *o, enum top_mode m)
{
	if (o->mode != MODE_LIVE && o->mode != m) {
		fprintf(stderr, "vgpu-top: --once, --json, --prometheus and "
			"--listen exclude each other\n");
		return -1;
	}
	o->mode = m;
	return 0;
}

static int parse_interval(struct top_opts *o, const char *v)
{
	char *end;
	double s = strtod(v, &end);

	if (end == v || *end || !(s >= 0 && s <= 3600)) {
		fprintf(stderr, "vgpu-top: --interval '%s': expected seconds "
			"from 0 to 3600\n", v);
		return -1;
	}
	o->interval = s;
	o->interval_set = true;
	return 0;
}

static int parse_listen(struct top_opts *o, const char *v)
{
	char msg[256];

	if (set_mode(o, MODE_LISTEN))
		return -1;
	if (top_listen_parse(v, &o->listen, msg, sizeof(msg)) == 0)
		return 0;
	fprintf(stderr, "vgpu-top: %s\n", msg);
	return -1;
}

/* An option with a value: 1 if handled (and *i moved on), 0 if not such
 * an option, -1 on a bad value. */
static int parse_valued(struct top_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;

	if (strcmp(a, "--ledger-dir") == 0)	/* vgpu-ctl's name for it */
		a = "--dir";
	if (strcmp(a, "--dir") && strcmp(a, "--interval") &&
	    strcmp(a, "--sort") && strcmp(a, "--filter") &&
	    strcmp(a, "--listen"))
		return 0;
	if (!v) {
		fprintf(stderr, "vgpu-top: %s needs a value\n", a);
		return -1;
	}
	(*i)++;
	if (strcmp(a, "--dir") == 0)
		o->dir = v;
	else if (strcmp(a, "--interval") == 0)
		return parse_interval(o, v) ? -1 : 1;
	else if (strcmp(a, "--filter") == 0)
		snprintf(o->filter, sizeof(o->filter), "%s", v);
	else if (strcmp(a, "--listen") == 0)
		return parse_listen(o, v) ? -1 : 1;
	else if (strlen(v) != 1 || sort_of(v[0], &o->view.sort) != 0) {
		fprintf(stderr, "vgpu-top: --sort '%s': expected m, c, p or "
			"t\n", v);
		return -1;
	}
	return 1;
}

/* 0, 1 (--help: done), or -1 on a bad command line. */
static int parse_args(int argc, char **argv, struct top_opts *o)
{
	const char *env = getenv("VGPU_LEDGER_DIR");
	int rc = 0;

	*o = (struct top_opts){ .mode = MODE_LIVE, .interval = 1.0,
				.dir = env && *env ? env : "/dev/shm/vgpu" };
	o->view.filter = o->filter;
	for (int i = 1; i < argc && rc == 0; i++) {
		int r = parse_valued(o, argc, argv, &i);

		if (r)
			rc = r < 0 ? -1 : 0;
		else if (strcmp(argv[i], "--once") == 0)
			rc = set_mode(o, MODE_ONCE);
		else if (strcmp(argv[i], "--json") == 0)
			rc = set_mode(o, MODE_JSON);
		else if (strcmp(argv[i], "--prometheus") == 0)
			rc = set_mode(o, MODE_PROMETHEUS);
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			rc = 1;
		else {
			fprintf(stderr, "vgpu-top: unknown argument '%s'\n",
				argv[i]);
			rc = -1;
		}
	}
	if (rc == 0 && o->mode == MODE_LISTEN && o->interval_set) {
		fprintf(stderr, "vgpu-top: --interval has no meaning with "
			"--listen (each scrape reads the ledgers once)\n");
		rc = -1;
	}
	if (rc == 0 && o->mode == MODE_LIVE && o->interval < 0.1) {
		fprintf(stderr, "vgpu-top: --interval must be at least 0.1 s "
			"for the live view\n");
		rc = -1;
	}
	return rc;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - floor(s)) * 1e9) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int hist_cap(double interval)
{
	double n = interval > 0 ? ceil(10.0 / interval) + 3 : 4;

	return n > 1000 ? 1000 : n < 4 ? 4 : (int)n;
}

static void say_empty(const struct top_snap *s, const char *dir)
{
	if (s->ngpus != 0)
		return;
	fputs("vgpu-top: no usable ledger files in '", stderr);
	top_put_escaped(stderr, dir, TOP_ESC_TEXT);
	fputs("' (no process has used a GPU through libvgpu with this ledger "
	      "directory yet)\n", stderr);
}

/* --once, --json, --prometheus: one read (two, an interval apart, for
 * rates, except for --prometheus, whose counters are rated by the
 * server). */
static int run_once(struct top_opts *o)
{
	struct top_hist h;
	struct top_snap s;
	const struct top_snap *cur;
	double interval = o->mode == MODE_PROMETHEUS && !o->interval_set ?
			  0 : o->interval;

	if (top_hist_init(&h, 4) != 0)
		return 1;
	if (top_snap_read(&s, o->dir, stderr) != 0) {
		top_hist_free(&h);
		return 1;
	}
	cur = top_hist_push(&h, &s);
	if (interval > 0) {
		sleep_s(interval);
		top_snap_read(&s, o->dir, NULL);
		cur = top_hist_push(&h, &s);
	}
	say_empty(cur, o->dir);
	o->view.color = false;
	if (o->mode == MODE_JSON)
		top_print_json(stdout, cur, o->dir, interval);
	else if (o->mode == MODE_PROMETHEUS)
		top_print_prometheus(stdout, cur);
	else
		top_print_text(stdout, cur, &o->view);
	top_hist_free(&h);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- the live view ---------------------------------------------------------------- */

static volatile sig_atomic_t got_quit, got_winch;
static struct termios saved_tio;
static bool tio_saved;

static void on_quit(int sig)
{
	(void)sig;
	got_quit = 1;
}

static void on_winch(int sig)
{
	(void)sig;
	got_winch = 1;
}

/* Leaves the alternate screen, shows the cursor, restores the terminal's
 * modes. Safe to call twice. */
static void term_restore(void)
{
	static const char seq[] = "\033[0m\033[?25h\033[?1049l";

	if (!tio_saved)
		return;
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
	if (write(STDOUT_FILENO, seq, sizeof(seq) - 1) < 0)
		return;
	tio_saved = false;
}

static struct termios raw_tio;

/* Ctrl-Z: the terminal back as it was, stop; on SIGCONT, the view again
 * (redrawn through the SIGWINCH path). Only async-signal-safe calls. */
static void on_tstp(int sig)
{
	static const char leave[] = "\033[0m\033[?25h\033[?1049l";
	static const char enter[] = "\033[?1049h\033[?25l";
	struct sigaction dfl = { .sa_handler = SIG_DFL }, me = { .sa_handler =
								  on_tstp };
	int saved = errno;
	sigset_t set;

	tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
	if (write(STDOUT_FILENO, leave, sizeof(leave) - 1) < 0)
		(void)0;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);	/* blocked in its handler */
	raise(sig);
	/* continued */
	sigemptyset(&me.sa_mask);
	sigaction(sig, &me, NULL);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw_tio);
	if (write(STDOUT_FILENO, enter, sizeof(enter) - 1) < 0)
		(void)0;
	got_winch = 1;
	errno = saved;
}

static int term_setup(void)
{
	static const char seq[] = "\033[?1049h\033[?25l\033[H\033[2J";
	struct sigaction sa = { .sa_handler = on_quit };
	struct termios raw;

	if (tcgetattr(STDIN_FILENO, &saved_tio) != 0)
		return -1;
	raw = saved_tio;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	raw.c_iflag &= ~(tcflag_t)(ICRNL | IXON);
	raw.c_cc[VMIN] = 0;
	raw.c_cc[VTIME] = 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = on_winch;
	sigaction(SIGWINCH, &sa, NULL);
	raw_tio = raw;
	sa.sa_handler = on_tstp;
	sigaction(SIGTSTP, &sa, NULL);
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0)
		return -1;
	tio_saved = true;
	atexit(term_restore);
	return write(STDOUT_FILENO, seq, sizeof(seq) - 1) < 0 ? -1 : 0;
}

struct live {
	struct top_opts *o;
	struct top_hist h;
	const struct top_snap *cur;
	bool typing;		/* reading a filter after '/' */
	char typed[128];
	int width, height;
};

static void term_size(struct live *lv)
{
	struct winsize ws;

	lv->width = 80;
	lv->height = 24;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 &&
	    ws.ws_row > 0) {
		lv->width = ws.ws_col;
		lv->height = ws.ws_row;
	}
}

/* The frame, composed in memory and written at once (no flicker). */
static void draw(struct live *lv)
{
	struct top_view v = lv->o->view;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return;
	v.color = true;
	v.width = lv->width;
	v.height = lv->height - 1;
	fputs("\033[H", f);
	top_print_text(f, lv->cur, &v);
	fputs("\033[J", f);
	fprintf(f, "\033[%d;1H\033[7m", lv->height);
	if (lv->typing)
		fprintf(f, "filter: %s_", lv->typed);
	else
		fprintf(f, "%.*s", lv->width, "q quit  m/c/p/t sort  "
			"/ filter  space refresh");
	fputs("\033[0m\033[K", f);
	fclose(f);
	for (size_t off = 0; off < len;) {
		ssize_t n = write(STDOUT_FILENO, buf + off, len - off);

		if (n <= 0 && errno != EINTR)
			break;
		off += n > 0 ? (size_t)n : 0;
	}
	free(buf);
}

/* A key while typing a filter. */
static void filter_key(struct live *lv, int c)
{
	size_t n = strlen(lv->typed);

	if (c == '\r' || c == '\n') {
		snprintf(lv->o->filter, sizeof(lv->o->filter), "%s", lv->typed);
		lv->typing = false;
	} else if (c == 27) {
		lv->o->filter[0] = '\0';
		lv->typing = false;
	} else if ((c == 127 || c == 8) && n > 0) {
		lv->typed[n - 1] = '\0';
	} else if (c >= 0x20 && c < 0x7f && n + 1 < sizeof(lv->typed)) {
		lv->typed[n] = (char)c;
		lv->typed[n + 1] = '\0';
	}
}

/* Handles the keys waiting; returns 1 to quit, 2 to read again now. */
static int keys(struct live *lv)
{
	unsigned char buf[64];
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
	int rc = 0;

	for (ssize_t i = 0; i < n; i++) {
		if (lv->typing) {
			filter_key(lv, buf[i]);
		} else if (buf[i] == 'q' || buf[i] == 'Q') {
			return 1;
		} else if (buf[i] == '/') {
			lv->typing = true;
			snprintf(lv->typed, sizeof(lv->typed), "%s",
				 lv->o->filter);
		} else if (buf[i] == ' ') {
			rc = 2;
		} else {
			sort_of(buf[i], &lv->o->view.sort);
		}
	}
	return rc;
}

static double mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for keys until the next refresh is due; 1 to quit. */
static int wait_keys(struct live *lv, double due)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };

	while (!got_quit) {
		double left = due - mono_now();
		int r, k;

		if (left <= 0)
			return 0;
		r = poll(&p, 1, (int)(left * 1000) + 1);
		if (got_winch) {
			got_winch = 0;
			term_size(lv);
			draw(lv);
		}
		if (r <= 0)
			continue;
		if (p.revents & (POLLHUP | POLLERR))
			return 1;
		k = keys(lv);
		if (k == 1)
			return 1;
		draw(lv);
		if (k == 2)
			return 0;
	}
	return 1;
}

static int run_live(struct top_opts *o)
{
	struct live lv = { .o = o };
	struct top_snap s;
	int rc = 0;

	if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
		fprintf(stderr, "vgpu-top: the live view needs a terminal; use "
			"--once, --json or --prometheus for output to a file "
			"or pipe\n");
		return 2;
	}
	if (top_hist_init(&lv.h, hist_cap(o->interval)) != 0)
		return 1;
	if (term_setup() != 0) {
		term_restore();
		fprintf(stderr, "vgpu-top: cannot set up the terminal\n");
		top_hist_free(&lv.h);
		return 1;
	}
	term_size(&lv);
	while (!got_quit) {
		double due = mono_now() + o->interval;

		top_snap_read(&s, o->dir, NULL);
		lv.cur = top_hist_push(&lv.h, &s);
		draw(&lv);
		if (wait_keys(&lv, due))
			break;
	}
	term_restore();
	top_hist_free(&lv.h);
	return rc;
}

int main(int argc, char **argv)
{
	struct top_opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	if (o.mode == MODE_LISTEN)
		return top_serve(o.dir, &o.listen);
	if (o.mode != MODE_LIVE)
		return run_once(&o);
	return run_live(&o);
}
