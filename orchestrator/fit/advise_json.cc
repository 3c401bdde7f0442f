// `xmod advise --format json` (AdviceJson).
#include <nlohmann/json.hpp>

#include "orchestrator/fit/advise.h"

namespace xmod {

namespace {

// The decision hold-out in AdviceJson.
nlohmann::json HoldoutJson(const DecisionHoldout& h) {
  nlohmann::json holdout = {{"available", h.available}};
  if (!h.available) {
    holdout["why"] = h.why;
  } else {
    nlohmann::json hr = nlohmann::json::array();
    for (const auto& r : h.rows) {
      hr.push_back({{"configuration", r.configuration},
                    {"runs", r.runs},
                    {"observed", r.observed},
                    {"observed_sd", r.observed_sd},
                    {"predicted", r.predicted}});
    }
    nlohmann::json compared = nlohmann::json::array();
    for (const auto& r : h.rows) compared.push_back(r.configuration);
    holdout.update(
        {{"scale", h.scale},
         {"compute", h.compute},
         {"tokens_per_param", h.tokens_per_param},
         {"dense_scales", h.dense_scales},
         {"compared", compared},
         {"verdict", h.verdict},
         {"pick", h.pick},
         {"pick_ran", h.pick_ran},
         {"pick_regret", h.pick_ran ? nlohmann::json(h.pick_regret) : nlohmann::json(nullptr)},
         {"fails", h.fails},
         {"rows", hr},
         {"chosen", h.chosen},
         {"observed_best", h.observed_best},
         {"agrees", h.agrees},
         {"regret", h.regret},
         {"noise", h.noise},
         {"holds", h.holds}});
  }
  return holdout;
}

}  // namespace

nlohmann::json AdviceJson(const Advice& a) {
  auto interval = [](const Interval& i) { return nlohmann::json::array({i.low, i.high}); };
  nlohmann::json rows = nlohmann::json::array();
  for (const ConfigurationAdvice& r : a.rows) {
    const Configuration& c = r.configuration;
    rows.push_back({{"configuration", c.name},
                    {"family", c.family},
                    {"law", r.law},
                    {"sparsity", 1.0 - c.capacity},
                    {"capacity", c.capacity},
                    {"stride", c.stride},
                    {"expansion", c.expansion},
                    {"block_expansion", c.block_expansion},
                    {"deltanet_share", c.deltanet_share},
                    {"N_active", r.n_active},
                    {"N_total", r.n_active * c.total_ratio},
                    {"D", r.tokens},
                    {"loss", r.loss},
                    {"loss_interval", interval(r.loss_interval)},
                    {"gain_vs_dense", r.gain},
                    {"gain_interval", interval(r.gain_interval)},
                    {"p_best", r.p_best},
                    {"at_edge", r.at_edge},
                    {"extrapolation", r.extrapolation.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(r.extrapolation)},
                    {"support",
                     {{"compute", {c.compute_min, c.compute_max}},
                      {"N_active", {c.n_min, c.n_max}},
                      {"tokens_per_param", {c.tpp_min, c.tpp_max}}}},
                    {"runs", c.runs}});
  }
  auto form_json = [](const FormAdvice& f) {
    nlohmann::json j = {{"law", f.law}, {"fitted", f.fitted}};
    if (!f.fitted) {
      j["error"] = f.error;
    } else {
      j["aic"] = f.information.aic;
      j["qaic"] = f.qaic;
      j["parameters"] = f.information.parameters;
      j["noise"] = f.information.noise;
      j["lack_of_fit"] = LackOfFitJson(f.lack_of_fit);
      j["on_bound"] = f.on_bound;
      j["holdout_rmse"] = f.holdout_rmse >= 0 ? nlohmann::json(f.holdout_rmse) : nullptr;
      j["holdout_points"] = f.holdout_points;
      j["holdout_choice"] = f.holdout_choice;
      j["best"] = f.best;
      j["p_best"] = f.p_best;
    }
    return j;
  };
  nlohmann::json forms = nlohmann::json::array();
  for (const FormAdvice& f : a.forms) forms.push_back(form_json(f));
  nlohmann::json dense_forms = nlohmann::json::array();
  for (const FormAdvice& f : a.dense_forms) dense_forms.push_back(form_json(f));
  const nlohmann::json holdout = HoldoutJson(a.holdout);
  return {{"fixed", a.options.fixed},
          {"compute", a.options.compute},
          {"context", a.options.context},
          {"n_active", a.options.n_active > 0 ? nlohmann::json(a.options.n_active) : nullptr},
          {"confidence", a.options.confidence},
          {"form", a.form},
          {"laws", a.laws},
          {"refits", a.refits},
          {"configurations", rows},
          {"forms", forms},
          {"dense_forms", dense_forms},
          {"kappa", a.dense_forms.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.kappa)},
          {"kappa_interval", interval(a.kappa_interval)},
          {"context_from_law", a.context_from_law},
          {"answer_changes_between_forms", a.answer_changes},
          {"c_hat", a.c_hat},
          {"delta_ic", a.delta_ic},
          {"forms_indistinguishable", a.forms_indistinguishable},
          {"support",
           {{"compute", {a.compute_min, a.compute_max}},
            {"N_active", {a.n_min, a.n_max}},
            {"tokens_per_param", {a.tpp_min, a.tpp_max}},
            {"contexts", a.contexts}}},
          {"extrapolation",
           a.extrapolation.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.extrapolation)},
          {"decision_holdout", holdout},
          {"left_out", a.left_out},
          {"uncalibrated", a.uncalibrated},
          {"unidentified", a.unidentified},
          {"notes", a.notes},
          {"verdict", a.verdict}};
}

}  // namespace xmod
