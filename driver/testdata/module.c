/*
 * A stand-in for a kernel module, compiled with `gcc -c` by the tests: it has
 * only what the driver stage's checks read, a .modinfo section and a symbol
 * table. The test passes the strings and symbol names as -D macros.
 */
#define STR(x) #x
#define XSTR(x) STR(x)
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)

#ifndef LICENSE
#define LICENSE "Dual MIT/GPL"
#endif

/* One NUL-separated key=value list, as MODULE_INFO() builds it. */
static const char modinfo[] __attribute__((section(".modinfo"), used, aligned(1))) =
	"license=" LICENSE
#ifdef VERMAGIC
	"\0vermagic=" VERMAGIC
#endif
#ifdef IMPORT_NS
	"\0import_ns=" XSTR(IMPORT_NS)
#endif
	;

#ifdef NEEDS
extern void NEEDS(void); /* an import: undefined in the object */
#endif
#ifdef WEAK
extern void WEAK(void) __attribute__((weak)); /* an optional import */
#endif

void peerboot_test_init(void)
{
#ifdef NEEDS
	NEEDS();
#endif
#ifdef WEAK
	if (WEAK)
		WEAK();
#endif
}

#ifdef EXPORTS
/*
 * What EXPORT_SYMBOL(x) leaves behind: a local __ksymtab_x in the symbol table
 * and the name in __ksymtab_strings (which depmod reads).
 */
static const void *XCAT(__ksymtab_, EXPORTS) __attribute__((used)) = (const void *)peerboot_test_init;
static const char XCAT(__kstrtab_, EXPORTS)[] __attribute__((section("__ksymtab_strings"), used, aligned(1))) = XSTR(EXPORTS);
#endif
