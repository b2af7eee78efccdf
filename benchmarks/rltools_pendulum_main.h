// The main shared by rltools_td3_pendulum.cpp and rltools_sac_pendulum.cpp, included after each
// has defined DEVICE, RNG, TI, TYPE_POLICY, ENVIRONMENT, LOOP_CONFIG and DRL_ALGO: trains with
// RLtools' loop core (`while(!step(...))`, timed alone), then evaluates the actor
// deterministically (10 episodes of 200 steps) and prints one JSON line.

using LOOP_STATE = LOOP_CONFIG::State<LOOP_CONFIG>;

constexpr TI N_EVAL_EPISODES = 10;
using EVAL_SPEC = rlt::rl::utils::evaluation::Specification<TYPE_POLICY, TI, ENVIRONMENT, N_EVAL_EPISODES, ENVIRONMENT::EPISODE_STEP_LIMIT>;

int main(int argc, char** argv){
    TI seed = argc > 1 ? (TI)std::strtoul(argv[1], nullptr, 10) : 0;
    DEVICE device;
    rlt::init(device);
    LOOP_STATE ts;
    rlt::malloc(device, ts);
    rlt::init(device, ts, seed);

    auto start = std::chrono::steady_clock::now();
    while(!rlt::step(device, ts)){}
    auto end = std::chrono::steady_clock::now();
    double train_seconds = std::chrono::duration<double>(end - start).count();

    // Deterministic evaluation of the trained actor (outside the timed region).
    ENVIRONMENT env_eval;
    ENVIRONMENT::Parameters env_eval_parameters;
    rlt::rl::environments::DummyUI ui;
    rlt::malloc(device, env_eval);
    rlt::init(device, env_eval);
    rlt::initial_parameters(device, env_eval, env_eval_parameters);
    RNG rng_eval;
    rlt::malloc(device, rng_eval);
    rlt::init(device, rng_eval, seed + 1000);
    rlt::rl::utils::evaluation::Result<EVAL_SPEC> result;
    rlt::Mode<rlt::mode::Evaluation<>> mode;
    rlt::evaluate(device, env_eval, ui, rlt::get_actor(ts), result, rng_eval, mode);

    std::printf("{\"impl\": \"rltools\", \"algo\": \"" DRL_ALGO "\", \"backend\": \"%s\", \"steps\": %d, \"seed\": %d, "
                "\"train_seconds\": %.6f, \"eval_return\": %.3f, \"eval_episodes\": %d}\n",
#if defined(RL_TOOLS_BACKEND_ENABLE_OPENBLAS)
                "openblas",
#else
                "generic",
#endif
                (int)DRL_STEPS, (int)seed, train_seconds, (double)result.returns_mean, (int)N_EVAL_EPISODES);
    rlt::free(device, ts);
    return 0;
}
