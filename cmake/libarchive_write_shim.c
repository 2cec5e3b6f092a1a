/* libarchive's tar writers call __archive_write_entry_filetype_unsupported(),
 * which lives in the object file that also holds archive_write_set_format()
 * and its table of every format — xar among them, which needs libxml2 (and
 * ICU). Linked statically, that one helper would drag both into PID 1. This
 * definition, always on the link line before libarchive.a, keeps them out.
 * Same behaviour as libarchive 3.6's own (archive_write_set_format.c). */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>

void __archive_write_entry_filetype_unsupported(struct archive* a, struct archive_entry* entry, const char* format) {
  archive_set_error(a, EINVAL, "%s: %s format cannot archive files with mode 0%o", archive_entry_pathname(entry), format,
                    (unsigned)archive_entry_filetype(entry));
}
