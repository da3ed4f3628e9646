/* image_ptx.c - PTX text: the entries, their parameters and limits.
 *
 * Not a PTX parser: a tokenizer that reads .version, .target and each
 * .entry's parameter list, thread limits and static .shared and .local
 * declarations, and skips everything else.
 */
#include "image_internal.h"

#include <stdlib.h>
#include <string.h>

#define IMG_MAX_PARAM_BYTES	32764u	/* CUDA's kernel parameter limit */

struct ptx_lex {
	const char *p;
	const char *end;
};

struct ptx_tok {
	const char *s;
	size_t n;		/* 0 at the end of the text */
};

/* A variable's type: what .param, .shared and .local declarations give. */
struct ptx_var {
	uint64_t size;
	uint64_t align;
};

static bool ptx_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '$' ||
	       c == '%';
}

static bool ptx_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

/* Skips white space, // and block comments. */
static void ptx_skip(struct ptx_lex *lx)
{
	while (lx->p < lx->end) {
		const char *q = lx->p;

		if (ptx_space(*q)) {
			lx->p++;
		} else if (*q == '/' && q + 1 < lx->end && q[1] == '/') {
			q = memchr(q, '\n', (size_t)(lx->end - q));
			lx->p = q ? q : lx->end;
		} else if (*q == '/' && q + 1 < lx->end && q[1] == '*') {
			q = memmem(q + 2, (size_t)(lx->end - q - 2), "*/", 2);
			lx->p = q ? q + 2 : lx->end;
		} else {
			return;
		}
	}
}

/* Next token: a run of identifier characters (dots included, so
 * ".param", "9.0" and "ld.param.u64" are one token each), a quoted
 * string, or one other character. */
static struct ptx_tok ptx_next(struct ptx_lex *lx)
{
	struct ptx_tok t;

	ptx_skip(lx);
	t.s = lx->p;
	if (lx->p == lx->end) {
		t.n = 0;
		return t;
	}
	if (ptx_ident_char(*lx->p)) {
		while (lx->p < lx->end && ptx_ident_char(*lx->p))
			lx->p++;
	} else if (*lx->p == '"') {
		const char *q = memchr(lx->p + 1, '"',
				       (size_t)(lx->end - lx->p - 1));
		lx->p = q ? q + 1 : lx->end;
	} else {
		lx->p++;
	}
	t.n = (size_t)(lx->p - t.s);
	return t;
}

static struct ptx_tok ptx_peek(const struct ptx_lex *lx)
{
	struct ptx_lex copy = *lx;

	return ptx_next(&copy);
}

static bool tok_is(struct ptx_tok t, const char *w)
{
	size_t n = strlen(w);

	return t.n == n && !memcmp(t.s, w, n);
}

/* A decimal (or 0x hex) number no greater than max. */
static bool tok_uint(struct ptx_tok t, uint64_t max, uint64_t *v)
{
	size_t i = 0;
	unsigned base = 10;

	if (t.n > 2 && t.s[0] == '0' && (t.s[1] == 'x' || t.s[1] == 'X')) {
		base = 16;
		i = 2;
	}
	if (i == t.n)
		return false;
	for (*v = 0; i < t.n; i++) {
		char c = t.s[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (unsigned)((c | 0x20) - 'a' + 10);
		else
			return false;
		*v = *v * base + d;
		if (*v > max)
			return false;
	}
	return true;
}

/* An identifier that is not a directive. */
static bool tok_name(struct ptx_tok t)
{
	return t.n && t.s[0] != '.' && ptx_ident_char(t.s[0]) &&
	       !(t.s[0] >= '0' && t.s[0] <= '9');
}

/* Bytes of a PTX fundamental type name ("u32"), 0 if it is none. */
static unsigned ptx_type_size(const char *s, size_t n)
{
	static const struct { const char *name; unsigned size; } types[] = {
		{ "b8", 1 }, { "s8", 1 }, { "u8", 1 },
		{ "b16", 2 }, { "s16", 2 }, { "u16", 2 }, { "f16", 2 },
		{ "bf16", 2 }, { "b32", 4 }, { "s32", 4 }, { "u32", 4 },
		{ "f32", 4 }, { "f16x2", 4 }, { "bf16x2", 4 }, { "b64", 8 },
		{ "s64", 8 }, { "u64", 8 }, { "f64", 8 }, { "b128", 16 },
		{ "texref", 8 }, { "samplerref", 8 }, { "surfref", 8 },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strlen(types[i].name) == n && !memcmp(types[i].name, s, n))
			return types[i].size;
	}
	return 0;
}

struct ptx_quals {
	unsigned elem;		/* fundamental type bytes */
	unsigned vec;		/* .v2, .v4: elements */
	uint64_t align;		/* .align N, 0 if none */
	bool ptr;		/* .ptr seen: later .align is the pointee's */
	bool want_align;	/* the next token is .align's number */
};

static bool seg_is(const char *s, size_t n, const char *w)
{
	return strlen(w) == n && !memcmp(s, w, n);
}

/* Applies one dot-separated qualifier ("u64", "align", "v4", "global"). */
static bool ptx_qual(struct ptx_quals *q, const char *s, size_t n)
{
	unsigned size = ptx_type_size(s, n);

	if (size) {
		q->elem = size;
	} else if (seg_is(s, n, "align")) {
		q->want_align = true;
	} else if (seg_is(s, n, "ptr")) {
		q->ptr = true;
	} else if (seg_is(s, n, "v2") || seg_is(s, n, "v4")) {
		q->vec = (unsigned)(s[1] - '0');
	} else if (!seg_is(s, n, "global") && !seg_is(s, n, "const") &&
		   !seg_is(s, n, "shared") && !seg_is(s, n, "local")) {
		return false;
	}
	return true;
}

/* Applies a qualifier token, which may hold several (".ptr.global"). */
static bool ptx_quals_tok(struct ptx_quals *q, struct ptx_tok t)
{
	size_t i = 0;

	while (i < t.n) {
		size_t j;

		if (t.s[i] != '.')
			return false;
		for (j = i + 1; j < t.n && t.s[j] != '.'; j++)
			;
		if (j == i + 1 || !ptx_qual(q, t.s + i + 1, j - i - 1))
			return false;
		i = j;
	}
	return true;
}

/* Reads "[N]" dimensions after a variable's name; "[]" counts as 0. */
static bool ptx_dims(struct ptx_lex *lx, uint64_t *count)
{
	struct ptx_tok t;
	uint64_t n;

	*count = 1;
	while (tok_is(ptx_peek(lx), "[")) {
		ptx_next(lx);
		t = ptx_next(lx);
		if (tok_is(t, "]")) {
			*count = 0;
			continue;
		}
		if (!tok_uint(t, IMG_MAX_SIZE, &n) ||
		    !tok_is(ptx_next(lx), "]"))
			return false;
		*count *= n;
		if (*count > IMG_MAX_SIZE)
			return false;
	}
	return true;
}

/* Reads the qualifiers, name and dimensions of a declaration whose state
 * space directive has been read. */
static bool ptx_var(struct ptx_lex *lx, struct ptx_var *v)
{
	struct ptx_quals q = { .vec = 1 };
	struct ptx_tok t;
	uint64_t count, n;

	for (t = ptx_next(lx); !tok_name(t); t = ptx_next(lx)) {
		if (q.want_align) {
			if (!tok_uint(t, 4096, &n) || !n || (n & (n - 1)))
				return false;
			if (!q.ptr)
				q.align = n;
			q.want_align = false;
		} else if (!t.n || !ptx_quals_tok(&q, t)) {
			return false;
		}
	}
	if (!q.elem || q.want_align || !ptx_dims(lx, &count))
		return false;
	v->size = (uint64_t)q.elem * q.vec * count;
	v->align = q.align ? q.align : (uint64_t)q.elem * q.vec;
	return v->size <= IMG_MAX_SIZE;
}

static CUresult ptx_add_param(struct img_ctx *cx, struct vsim_kernel_desc *k,
			      uint32_t *cap, const struct ptx_var *v)
{
	uint64_t off = ((uint64_t)k->param_bytes + v->align - 1) &
		       ~(v->align - 1);

	if (!v->size || off + v->size > IMG_MAX_PARAM_BYTES)
		return vsim__image_invalid(cx, "PTX parameters too large");
	if (k->nparams == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 8;
		struct vsim_param *np = realloc(k->params,
						ncap * sizeof(*np));

		if (!np)
			return vsim__image_nomem(cx);
		k->params = np;
		*cap = ncap;
	}
	k->params[k->nparams].offset = (uint32_t)off;
	k->params[k->nparams].size = (uint32_t)v->size;
	k->nparams++;
	k->param_bytes = (uint32_t)(off + v->size);
	return CUDA_SUCCESS;
}

/* Reads "(.param ..., .param ...)" after an entry's name. */
static CUresult ptx_params(struct img_ctx *cx, struct ptx_lex *lx,
			   struct vsim_kernel_desc *k)
{
	uint32_t cap = 0;
	struct ptx_tok t = ptx_next(lx);
	struct ptx_var v;
	CUresult rc;

	if (tok_is(t, ")"))
		return CUDA_SUCCESS;
	for (;;) {
		if (!tok_is(t, ".param") || !ptx_var(lx, &v))
			return vsim__image_invalid(cx, "bad PTX parameter");
		rc = ptx_add_param(cx, k, &cap, &v);
		if (rc != CUDA_SUCCESS)
			return rc;
		t = ptx_next(lx);
		if (tok_is(t, ")"))
			return CUDA_SUCCESS;
		if (!tok_is(t, ","))
			return vsim__image_invalid(cx,
					"bad PTX parameter list");
		t = ptx_next(lx);
	}
}

/* Reads ".maxntid x, y, z" or ".reqntid ..." (1 to 3 numbers). */
static CUresult ptx_ntid(struct img_ctx *cx, struct ptx_lex *lx,
			 struct vsim_kernel_desc *k)
{
	uint64_t dim[3] = { 1, 1, 1 };

	for (int i = 0; i < 3; i++) {
		if (!tok_uint(ptx_next(lx), UINT32_MAX, &dim[i]))
			return vsim__image_invalid(cx,
					"bad PTX .maxntid/.reqntid");
		if (!tok_is(ptx_peek(lx), ","))
			break;
		ptx_next(lx);
	}
	vsim__image_limit_threads(k, dim[0], dim[1], dim[2]);
	return CUDA_SUCCESS;
}

/* Adds a .shared or .local declaration in an entry's body to k. */
static CUresult ptx_body_decl(struct img_ctx *cx, struct ptx_lex *lx,
			      struct vsim_kernel_desc *k, bool shared)
{
	struct ptx_var v;
	uint64_t total;

	if (!ptx_var(lx, &v))
		return vsim__image_invalid(cx, "bad PTX declaration");
	total = (uint64_t)(shared ? k->shared_bytes : k->local_bytes);
	total = ((total + v.align - 1) & ~(v.align - 1)) + v.size;
	if (total > INT32_MAX)
		return vsim__image_invalid(cx, "PTX declaration too large");
	if (shared)
		k->shared_bytes = (int)total;
	else
		k->local_bytes = (int)total;
	return CUDA_SUCCESS;
}

/* Reads an entry's body up to its closing brace: static .shared and
 * .local declarations at the start of statements are counted. */
static CUresult ptx_body(struct img_ctx *cx, struct ptx_lex *lx,
			 struct vsim_kernel_desc *k)
{
	size_t depth = 1;
	bool stmt = true;
	CUresult rc = CUDA_SUCCESS;

	while (depth && rc == CUDA_SUCCESS) {
		struct ptx_tok t = ptx_next(lx);

		if (!t.n)
			return vsim__image_invalid(cx,
					"unterminated PTX entry");
		if (stmt && (tok_is(t, ".shared") || tok_is(t, ".local")))
			rc = ptx_body_decl(cx, lx, k, tok_is(t, ".shared"));
		if (tok_is(t, "{"))
			depth++;
		else if (tok_is(t, "}"))
			depth--;
		stmt = tok_is(t, "{") || tok_is(t, "}") || tok_is(t, ";");
	}
	return rc;
}

/* Reads ".entry name (params) directives { body }". */
static CUresult ptx_entry(struct img_ctx *cx, struct ptx_lex *lx,
			  struct vsim_image *img, uint32_t *cap)
{
	struct ptx_tok t = ptx_next(lx);
	struct vsim_kernel_desc *k;
	CUresult rc = CUDA_SUCCESS;
	bool have_params = false;

	if (!tok_name(t))
		return vsim__image_invalid(cx, "PTX entry without a name");
	k = vsim__image_add_kernel(img, cap);
	if (!k || !(k->name = strndup(t.s, t.n)))
		return vsim__image_nomem(cx);
	for (t = ptx_next(lx); rc == CUDA_SUCCESS; t = ptx_next(lx)) {
		if (tok_is(t, "(") && have_params) {
			return vsim__image_invalid(cx,
					"two PTX parameter lists");
		} else if (tok_is(t, "(")) {
			have_params = true;
			rc = ptx_params(cx, lx, k);
		} else if (tok_is(t, ".maxntid") || tok_is(t, ".reqntid")) {
			rc = ptx_ntid(cx, lx, k);
		} else if (tok_is(t, "{")) {
			return ptx_body(cx, lx, k);
		} else if (tok_is(t, ";")) {
			return CUDA_SUCCESS;
		} else if (!t.n) {
			return vsim__image_invalid(cx,
					"PTX entry without a body");
		}
	}
	return rc;
}

/* ".version X.Y" gives X*10+Y. */
static CUresult ptx_version(struct img_ctx *cx, struct ptx_tok t, int *ver)
{
	const char *dot = memchr(t.s, '.', t.n);
	struct ptx_tok major_tok, minor_tok;
	uint64_t major, minor;

	if (!dot)
		return vsim__image_invalid(cx, "bad PTX .version");
	major_tok = (struct ptx_tok){ t.s, (size_t)(dot - t.s) };
	minor_tok = (struct ptx_tok){ dot + 1, t.n - major_tok.n - 1 };
	if (!tok_uint(major_tok, 99, &major) || !tok_uint(minor_tok, 9, &minor))
		return vsim__image_invalid(cx, "bad PTX .version");
	*ver = (int)(major * 10 + minor);
	return CUDA_SUCCESS;
}

/* ".target sm_XY[a|f], ..." gives XY; other targets are left alone. */
static void ptx_target(struct ptx_tok t, int *arch)
{
	uint64_t v = 0;
	size_t i;

	if (t.n < 4 || memcmp(t.s, "sm_", 3))
		return;
	for (i = 3; i < t.n && t.s[i] >= '0' && t.s[i] <= '9' && v < 10000; i++)
		v = v * 10 + (uint64_t)(t.s[i] - '0');
	if (i > 3)
		*arch = (int)v;
}

/* True when the text starts, after comments, with .version. */
bool vsim__image_ptx_looks_like(const char *text, size_t n)
{
	struct ptx_lex lx = { text, text + n };

	return tok_is(ptx_next(&lx), ".version");
}

CUresult vsim__image_ptx_parse(struct img_ctx *cx, const char *text,
			       size_t n, struct vsim_image *img)
{
	struct ptx_lex lx = { text, text + n };
	uint32_t cap = 0;
	CUresult rc = CUDA_SUCCESS;
	struct ptx_tok t;

	if (!vsim__image_ptx_looks_like(text, n))
		return vsim__image_invalid(cx,
				"PTX does not start with .version");
	img->kind = VSIM_IMAGE_PTX;
	for (t = ptx_next(&lx); t.n && rc == CUDA_SUCCESS; t = ptx_next(&lx)) {
		if (tok_is(t, ".version"))
			rc = ptx_version(cx, ptx_next(&lx), &img->ptx_version);
		else if (tok_is(t, ".target"))
			ptx_target(ptx_next(&lx), &img->arch);
		else if (tok_is(t, ".entry"))
			rc = ptx_entry(cx, &lx, img, &cap);
	}
	return rc;
}

/* Length of the PTX text: up to the NUL, or to size when it has none. */
size_t vsim__image_ptx_length(const uint8_t *p, size_t size)
{
	const uint8_t *nul;

	if (!size)
		return strlen((const char *)p);
	nul = memchr(p, 0, size);
	return nul ? (size_t)(nul - p) : size;
}
