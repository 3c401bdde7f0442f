// Model-free local slopes of a sweep's losses (`xmod results SWEEP --slopes`,
// docs/laws.md "Local slopes"): between neighbouring design points of one
// configuration, d ln L / d ln D at each scale (budgets of one scale) and
// d ln L / d ln N at each budget (scales at one budget value, with what that
// budget holds fixed), each from the seeds both points share, with a t interval
// over those seeds.
#ifndef XMOD_ORCHESTRATOR_REPORT_SLOPES_H_
#define XMOD_ORCHESTRATOR_REPORT_SLOPES_H_

#include <vector>

#include "orchestrator/report/output.h"
#include "orchestrator/store/rows.h"

namespace xmod {

// One row per neighbouring pair: config, context, along ("D" or "N"), at (the
// scale, or the budget held), from and to (D or N), slope (mean over shared
// seeds), low and high (95% t interval over seeds; empty with one seed), seeds.
QueryResult LocalSlopes(const std::vector<JobResultRow>& jobs);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_REPORT_SLOPES_H_
