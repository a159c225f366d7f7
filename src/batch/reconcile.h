// Start-up reconciliation of the output file with the progress DB, before any server is
// contacted. The DB's output mark says where the verified part of the file ends and the hash of
// the last line there; only what lies past it is read:
//   - the last known line is checked by hash (another file at this path is refused);
//   - a partial last line (a kill during an append) is cut;
//   - a line of a done row (a kill between the append and the DB's note) is noted as written;
//   - a line of a row not done (the DB was deleted, or an OS crash dropped its last commits) is
//     adopted as the record's result, but only if the settings it records are this run's
//     (else refused, naming how many and the first id, unless accept_existing);
//   - if the file is shorter than the mark (lines lost since), it is cut to the last line the
//     DB knows whole and the lost records go back to pending (the DB keeps no lines to rewrite).
// Then WriteFinished() (work_queue.h) writes the done rows' lines the file lacks.
#pragma once

#include <cstdint>
#include <string>

#include "batch/output_record.h"
#include "batch/output_writer.h"
#include "batch/progress_db.h"
#include "core/status.h"

namespace mlaserve::batch {

struct ReconcileOptions {
  OutputSettings settings;       // this run's: seed, temperature, top_p, max_new_tokens (model if check_model)
  bool check_model = false;      // --model given: the lines' settings.model must be it
  bool accept_existing = false;  // adopt lines made with other settings
};

struct ReconcileReport {
  int64_t truncated_bytes = 0;  // a partial last line cut
  int64_t lost = 0;             // written rows whose lines the file lost: pending again
  int64_t noted = 0;            // done rows whose lines were already in the file
  int64_t adopted = 0;          // lines of rows not done, adopted as results
  int64_t accepted_other_settings = 0;  // of those, made with other settings (accept_existing)
  int64_t tail_lines = 0;       // lines read past the DB's mark
};

Result<ReconcileReport> Reconcile(OutputWriter& writer, ProgressDb& db, const ReconcileOptions& options);

// How a line's "settings" differ from this run's ("max_new_tokens 64, this run 32"); empty when
// they agree.
std::string SettingsDifference(const nlohmann::json& line_settings, const OutputSettings& want, bool check_model);

}  // namespace mlaserve::batch
