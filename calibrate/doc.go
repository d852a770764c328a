// Package calibrate fits the simulators' cost models to measured requests
// and writes the fit as kvsim configuration: [Calibrate] fits the SGLang
// simulator's fitted cost model (hw.Fitted) to a concurrency-1
// per-request trace, and [FitLlamaRuns] fits llama-server's CPU cost
// (llamacpp.CPUCost) to replays of the calibration trace that
// [LlamaCalibrationTrace] generates, optionally with the server's own logs
// ([ReadLlamaServerLog]). The per-request traces come from kvsim replay
// --per-request or kvsim capture; the package itself sends nothing.
//
// # Model
//
// Both fits are non-negative least squares with a free intercept on
// relative errors, solved with the active-set method of Lawson and Hanson
// (Solving Least Squares Problems, 1974, ch. 23). The features are those
// the simulators charge: hw.PrefillFeatures and hw.DecodeFeatures for
// SGLang, a llama-server call's prompt calls, new tokens and attention
// pairs (llamacpp.Attention with tiles) for llama.cpp. The llama fit takes
// each shape's median request, so one stalled request on a noisy machine
// does not move it.
//
// # Output
//
// [Calibration.WriteTOML] writes the [cost] section of an SGLang config and
// [LlamaCalibration.WriteLlamaTOML] a complete llama-server config, each
// after comments that say where the fit came from and how well it fits.
// Both build the configuration package's own types (configs.CostSection;
// configs.EngineSection and configs.LlamaSection with its LlamaCost) and
// marshal them with go-toml, so the snippets have configs' key names by
// construction and load with configs.Parse. Coefficients are written to
// six significant digits.
//
// # Import order
//
// calibrate sits above configs (tree, traces <- planner <- sim <- fleet <-
// replay <- configs <- calibrate <- study <- cmd); it uses nothing of
// replay but its tests, which measure the in-process simulator through
// replay's SimTarget.
//
// # Not done here
//
// At concurrency 1 the per-request constants cannot be told from the
// intercepts (hw.Fitted's a3 and b1 are written as 0). The calibration
// does not model the GPU: an SGLang fit holds for the server, model and
// hardware it was measured on.
package calibrate
