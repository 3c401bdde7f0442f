# Run with cmake -P at build time: installs the dashboard's chart library from
# SOURCE/package-lock.json with `npm ci` into WORK (again only when the lock file
# changed), then has esbuild bundle SOURCE/charts.js with uPlot into
# OUT_DIR/charts.js and OUT_DIR/charts.css, which EmbedFiles puts in the binary.
# NPM: the npm to run. A failure stops the build and says why and how to build
# without the charts.
set(advice "build without the charts with -DXMOD_DASHBOARD_CHARTS=OFF (the dashboard then shows tables only)")
file(MAKE_DIRECTORY "${WORK}")
file(SHA256 "${SOURCE}/package-lock.json" want)
set(have "")
if(EXISTS "${WORK}/installed.sha256")
  file(READ "${WORK}/installed.sha256" have)
endif()
if(NOT have STREQUAL want OR NOT EXISTS "${WORK}/node_modules/.bin/esbuild")
  file(COPY "${SOURCE}/package.json" "${SOURCE}/package-lock.json" DESTINATION "${WORK}")
  execute_process(COMMAND "${NPM}" ci --no-audit --no-fund
                  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_FILE "${WORK}/npm.log" ERROR_FILE "${WORK}/npm.log")
  if(NOT rc EQUAL 0)
    file(STRINGS "${WORK}/npm.log" log)
    list(LENGTH log n)
    math(EXPR from "${n} - 12")
    if(from LESS 0)
      set(from 0)
    endif()
    list(SUBLIST log ${from} -1 tail)
    list(JOIN tail "\n  " tail)
    message(FATAL_ERROR "The dashboard's charts: 'npm ci' in ${WORK} failed (${rc}); does this "
                        "machine reach the npm registry? Its log ends:\n  ${tail}\nOr ${advice}.")
  endif()
  file(WRITE "${WORK}/installed.sha256" "${want}")
endif()
file(COPY "${SOURCE}/charts.js" DESTINATION "${WORK}")
execute_process(COMMAND "${WORK}/node_modules/.bin/esbuild" "${WORK}/charts.js" --bundle --minify
                        --format=iife --log-level=warning "--outfile=${OUT_DIR}/charts.js"
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "The dashboard's charts: esbuild failed (${rc}):\n${err}\nOr ${advice}.")
endif()
