/* options.h - the core's options: every VGPU_* variable, its HAMi alias,
 * the pure parsers behind them, and the loader that fills struct vgpu_options.
 *
 * Internal to the core (vgpu/). Nothing here allocates, locks or uses stdio,
 * so all of it may run inside a library constructor. docs/configuration.md
 * is the user-facing description of the same table.
 */
#ifndef VGPU_OPTIONS_H
#define VGPU_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VGPU_MAX_DEVICES	64	/* per-device suffixes _0 .. _63 */
#define VGPU_PATH_MAX		4096	/* bytes, with the NUL */
#define VGPU_TENANT_MAX		64	/* bytes, with the NUL */
#define VGPU_GROUP_MAX		64	/* bytes, with the NUL */
#define VGPU_UNLIMITED		UINT64_MAX	/* no size limit */

enum vgpu_opt_id {
	VGPU_OPT_MEMORY_LIMIT,
	VGPU_OPT_COMPUTE_LIMIT,
	VGPU_OPT_COMPUTE_POLICY,
	VGPU_OPT_COMPUTE_MODE,
	VGPU_OPT_OVERCOMMIT,
	VGPU_OPT_HOST_SPILL_LIMIT,
	VGPU_OPT_CONTEXT_OVERHEAD,
	VGPU_OPT_CONTROL,
	VGPU_OPT_LEDGER_DIR,
	VGPU_OPT_LEDGER_GROUP,
	VGPU_OPT_TENANT,
	VGPU_OPT_LOG_LEVEL,
	VGPU_OPT_VERBOSE,
	VGPU_OPT_ON_ERROR,
	VGPU_OPT_DISABLE,
	VGPU_OPT_REAL_LIBCUDA,
	VGPU_OPT_COUNT
};

enum vgpu_compute_policy {
	VGPU_POLICY_HARD,	/* never above the share */
	VGPU_POLICY_ELASTIC,	/* share guaranteed, idle time lent out */
	VGPU_POLICY_OFF,	/* compute limits not enforced */
	VGPU_POLICY_OPPORTUNISTIC,	/* only time no guaranteed tenant
					 * wants (docs/compute.md) */
};

enum vgpu_compute_mode {
	VGPU_MODE_TIME,		/* GPU-time throttle */
	VGPU_MODE_SPATIAL,	/* green contexts, falls back to time */
};

enum vgpu_overcommit {
	VGPU_OVERCOMMIT_OFF,
	VGPU_OVERCOMMIT_MANAGED,
	VGPU_OVERCOMMIT_HOST,
	VGPU_OVERCOMMIT_AUTO,	/* the best mode the driver supports */
};

enum vgpu_log_level {
	VGPU_LOG_ERROR,
	VGPU_LOG_WARN,
	VGPU_LOG_INFO,
	VGPU_LOG_DEBUG,
};

enum vgpu_on_error {
	VGPU_ON_ERROR_REFUSE,	/* a bad option refuses the device */
	VGPU_ON_ERROR_WARN,	/* a bad option is reported and ignored */
};

/* Where an effective value came from. */
enum vgpu_opt_src {
	VGPU_SRC_DEFAULT,
	VGPU_SRC_NAME,		/* VGPU_X */
	VGPU_SRC_ALIAS,		/* the HAMi alias */
	VGPU_SRC_DEVICE_NAME,	/* VGPU_X_<i> */
	VGPU_SRC_DEVICE_ALIAS,	/* the alias's _<i> */
};
/* Or'ed into a source: the alias was set as well and was ignored. */
#define VGPU_SRC_SHADOWED	0x80
#define VGPU_SRC_MASK		0x7f

/*
 * The effective options. Per-device arrays hold the value for each CUDA
 * ordinal (after CUDA_VISIBLE_DEVICES): the global value unless a _<i>
 * variable set that device. Enum-valued fields are plain ints holding the
 * enum named in their comment.
 */
struct vgpu_options {
	uint64_t memory_limit;		/* bytes or VGPU_UNLIMITED */
	uint64_t device_memory_limit[VGPU_MAX_DEVICES];
	unsigned compute_limit;		/* percent 1..100, 100: no cap */
	unsigned device_compute_limit[VGPU_MAX_DEVICES];
	int compute_policy;		/* enum vgpu_compute_policy */
	int compute_mode;		/* enum vgpu_compute_mode */
	int overcommit;			/* enum vgpu_overcommit */
	uint64_t host_spill_limit;	/* bytes or VGPU_UNLIMITED */
	uint64_t context_overhead;	/* bytes charged per context */
	bool control;			/* vgpu-ctl may suspend the tenant */
	char ledger_dir[VGPU_PATH_MAX];
	char ledger_group[VGPU_GROUP_MAX];	/* "": none */
	char tenant[VGPU_TENANT_MAX];
	int log_level;			/* enum vgpu_log_level */
	bool verbose;
	int on_error;			/* enum vgpu_on_error */
	bool disable;
	char real_libcuda[VGPU_PATH_MAX];	/* "" : search for it */
	uint8_t src[VGPU_OPT_COUNT];	/* enum vgpu_opt_src | SHADOWED */
	uint8_t device_src[VGPU_OPT_COUNT][VGPU_MAX_DEVICES];
};

/* Parser results: 0 is success, the rest say what was wrong. */
enum vgpu_parse_status {
	VGPU_PARSE_OK,
	VGPU_PARSE_EMPTY,
	VGPU_PARSE_NEGATIVE,
	VGPU_PARSE_NOT_NUMBER,
	VGPU_PARSE_FRACTION,
	VGPU_PARSE_TRAILING,
	VGPU_PARSE_UNIT,
	VGPU_PARSE_OVERFLOW,
	VGPU_PARSE_RANGE,
	VGPU_PARSE_UNKNOWN_WORD,
	VGPU_PARSE_NOT_ABSOLUTE,
	VGPU_PARSE_TOO_LONG,
	VGPU_PARSE_BAD_CHAR,
};

enum vgpu_opt_kind {
	VGPU_KIND_SIZE,		/* uint64_t field */
	VGPU_KIND_PERCENT,	/* unsigned field */
	VGPU_KIND_ENUM,		/* int field, an index into values[] */
	VGPU_KIND_BOOL,		/* bool field */
	VGPU_KIND_PATH,		/* char[VGPU_PATH_MAX] field */
	VGPU_KIND_STRING,	/* char[] field of field_size bytes */
};

/* A parsed value on its way to the struct: a number or a string slice. */
struct vgpu_optval {
	uint64_t num;
	const char *str;
	size_t len;
};

struct vgpu_opt_desc;
typedef int (*vgpu_opt_parse_fn)(const struct vgpu_opt_desc *d,
				 const char *s, struct vgpu_optval *v);

/* One entry of the table: everything known about one option. */
struct vgpu_opt_desc {
	const char *name;		/* VGPU_X */
	const char *alias;		/* HAMi name, or NULL */
	enum vgpu_opt_kind kind;
	bool per_device;		/* also read as NAME_<i>, ALIAS_<i> */
	const char *const *values;	/* ENUM: names, NULL-terminated */
	uint64_t def;			/* default of a numeric option */
	const char *def_str;		/* default of a path or string */
	uint64_t min, max;		/* numeric range */
	const char *unit;		/* for docs: bytes, percent, ... */
	const char *expect;		/* "expected ..." for NAME */
	const char *alias_expect;	/* "expected ..." for ALIAS */
	const char *doc;		/* one line */
	size_t offset;			/* global field in vgpu_options */
	size_t device_offset;		/* per-device array, if any */
	size_t field_size;		/* bytes of a PATH/STRING field */
	vgpu_opt_parse_fn parse;	/* NAME's value */
	vgpu_opt_parse_fn alias_parse;	/* ALIAS's value */
};

/* A string being built in a fixed buffer; always NUL-terminated. */
struct vgpu_fmtbuf {
	char *buf;
	size_t cap;
	size_t len;
	bool truncated;
};

/* ---- parse.c: pure parsers and formatters ---------------------------- */

/* s may be NULL (reported as empty). */
int vgpu__parse_size(const char *s, uint64_t *out);
int vgpu__parse_percent(const char *s, unsigned *out);
int vgpu__parse_bool(const char *s, bool *out);
int vgpu__parse_enum(const char *s, const char *const *names, int *out);
int vgpu__parse_log_level(const char *s, int *out);
const char *vgpu__parse_strerror(int status);
int vgpu__format_size(char *buf, size_t len, uint64_t bytes);
int vgpu__format_tenant(char *buf, size_t len, unsigned long uid,
			const char *host);

/* Helpers shared with options.c and options_dump.c. */
extern const char *const vgpu__log_level_names[];
extern const int vgpu__log_level_numbers[];	/* HAMi 0..4 */
bool vgpu__is_digit(char c);
bool vgpu__is_graph(char c);
bool vgpu__word_eq(const char *s, const char *w);
int vgpu__parse_whole(const char **sp, uint64_t *out);
void vgpu__fb_init(struct vgpu_fmtbuf *b, char *buf, size_t cap);
void vgpu__fb_putc(struct vgpu_fmtbuf *b, char c);
void vgpu__fb_puts(struct vgpu_fmtbuf *b, const char *s);
void vgpu__fb_u64(struct vgpu_fmtbuf *b, uint64_t v);
void vgpu__fb_quoted(struct vgpu_fmtbuf *b, const char *s);
void vgpu__fb_finish(struct vgpu_fmtbuf *b);

/* ---- options.c: the table, loading, accessors ------------------------ */

const struct vgpu_opt_desc *vgpu__option_desc(enum vgpu_opt_id id);
const char *vgpu__option_value_name(enum vgpu_opt_id id, int value);
size_t vgpu__option_value_offset(const struct vgpu_opt_desc *d, int dev);
uint64_t vgpu__option_load_num(const struct vgpu_options *o,
			       const struct vgpu_opt_desc *d, size_t off);
void vgpu__options_defaults(struct vgpu_options *o);
/* envp: NAME=value strings, NULL-terminated (environ); bad values and
 * unknown names both counted and described in err. */
int vgpu__options_load(struct vgpu_options *out, const char *const *envp,
		       char *err, size_t errlen);
/* The value of name in envp (NAME=value strings, NULL-terminated; NULL
 * for none): the first definition, as getenv(3) finds it. */
const char *vgpu__env_get(const char *const *envp, const char *name);

/* ---- options_names.c: variables that name no option ------------------ */

int vgpu__options_check_names(const char *const *envp, char *err,
			      size_t errlen);
/* The same, appended to eb (vgpu__options_load's report). */
int vgpu__options_names_into(const char *const *envp,
			     struct vgpu_fmtbuf *eb);
/* Whether name[0..n) starts with word followed by '_'. */
bool vgpu__name_has_prefix(const char *name, size_t n, const char *word);
/* Per-device variables naming a device at or past count (the devices the
 * driver shows the process): the VGPU_ names, or with hami HAMi's
 * (CUDA_DEVICE_*: warnings only, as HAMi-core ignores them); HAMi names
 * misspelt (warnings only). Both describe each in err and return the
 * count. */
int vgpu__options_check_devices(const char *const *envp, unsigned count,
				bool hami, char *err, size_t errlen);
int vgpu__options_check_hami_names(const char *const *envp, char *err,
				   size_t errlen);
uint64_t vgpu__options_memory_limit(const struct vgpu_options *o,
				    unsigned dev);
unsigned vgpu__options_compute_limit(const struct vgpu_options *o,
				     unsigned dev);

/* ---- options_dump.c: the verbose dump -------------------------------- */

int vgpu__options_dump(const struct vgpu_options *o, int fd);

#endif /* VGPU_OPTIONS_H */
