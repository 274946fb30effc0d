// Package trash puts files in the freedesktop.org trash (the Trash
// specification 1.0), where any file manager can restore them.
//
// # Where
//
// A file goes to the trash of its own file system, so that moving it is
// one rename. That is the home trash, $XDG_DATA_HOME/Trash, when the
// data home is on the file's file system and owned by the user; else
// $topdir/.Trash/$uid when $topdir/.Trash is a folder with the sticky
// bit and not a symlink; else $topdir/.Trash-$uid. $topdir is the mount
// point of the file's file system. A missing trash folder is made, 0700
// and owned by the user; an existing one must be a folder, not a symlink,
// and owned by the user, or the file is not trashed.
//
// # How
//
// A trash holds files/NAME and info/NAME.trashinfo. Reserve writes the
// info file first, created with O_EXCL so that two programs never take
// one name; Move then renames the file into files/ with RENAME_NOREPLACE.
// Names repeat as file managers do: NAME, NAME.2, NAME.3. The info file
// says where the file was (Path, URL-escaped; absolute in the home trash,
// relative to $topdir in the others) and when it was trashed
// (DeletionDate, local time, YYYY-MM-DDThh:mm:ss). Every step is synced
// before the next, so after a crash a file is at its old name or in the
// trash with its info file, never neither; an info file without its file
// is the one leftover, and Unreserve removes it.
package trash
