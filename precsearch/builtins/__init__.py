"""The built-in plugins, registered through entry points exactly like third-party ones.

======================  ==========================================
module                  plugins
======================  ==========================================
``dimensions``          layer_dtypes, loss_scale, batch_size, jit_compile
``objectives``          speedup, fidelity
``loaders``             model_file
``exporters``           policy_json, saved_model, trials_csv
======================  ==========================================
"""
