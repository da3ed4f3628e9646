/* gen_symbols.c - build-time tool: prints the functions a shared library
 * exports (defined, global or weak STT_FUNC in .dynsym), one per line.
 *
 * Run on the toolkit's driver stub, it gives the driver's symbol list, from
 * which the shim's forwarders are generated.
 *
 * usage: gen_symbols LIBRARY OUTPUT
 */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int dump(Elf *elf, FILE *out)
{
	Elf_Scn *scn = NULL;
	int n = 0;

	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *data;
		size_t count;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data || sh.sh_entsize == 0)
			return -1;
		count = sh.sh_size / sh.sh_entsize;
		for (size_t i = 1; i < count; i++) {
			GElf_Sym sym;
			const char *name;
			int bind;

			if (!gelf_getsym(data, (int)i, &sym))
				return -1;
			bind = GELF_ST_BIND(sym.st_info);
			if (GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    sym.st_shndx == SHN_UNDEF ||
			    (bind != STB_GLOBAL && bind != STB_WEAK))
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || !*name)
				return -1;
			fprintf(out, "%s\n", name);
			n++;
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	FILE *out;
	Elf *elf;
	int fd, n;

	if (argc != 3) {
		fprintf(stderr, "usage: gen_symbols LIBRARY OUTPUT\n");
		return 2;
	}
	if (elf_version(EV_CURRENT) == EV_NONE) {
		fprintf(stderr, "gen_symbols: libelf: %s\n", elf_errmsg(-1));
		return 1;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		fprintf(stderr, "gen_symbols: %s: not an ELF file\n", argv[1]);
		return 1;
	}
	out = fopen(argv[2], "w");
	if (!out) {
		perror(argv[2]);
		return 1;
	}
	n = dump(elf, out);
	elf_end(elf);
	close(fd);
	if (fclose(out) != 0 || n <= 0) {
		fprintf(stderr, "gen_symbols: %s: no exported functions read\n",
			argv[1]);
		unlink(argv[2]);
		return 1;
	}
	return 0;
}
