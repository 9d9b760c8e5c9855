#include <sqlite3.h>

// sqlite3_db_config is variadic (Swift cannot call it): refuse double-quoted string literals in DML and DDL,
// so a misquoted identifier is an error instead of a string (as GRDB configured its connections).
static inline int csqlite_refuse_double_quoted_strings(sqlite3 *db) {
  int rc = sqlite3_db_config(db, SQLITE_DBCONFIG_DQS_DML, 0, (int *)0);
  return rc == SQLITE_OK ? sqlite3_db_config(db, SQLITE_DBCONFIG_DQS_DDL, 0, (int *)0) : rc;
}
